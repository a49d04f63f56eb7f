//! The reference the man pages carry beyond the `--help` text: the config
//! file, the JSON of `status --json` and `list --json`, the metrics file.
//! Written once here; `generate.rs` puts each on the pages it belongs to,
//! with the exit status and environment texts the `--help` shows.

/// FILES: where the config file is looked for, and every key.
pub const CONFIG_FILE: &str = r#"The config file names ensembles, so that `-z @NAME` (or
ZKLOCK_ZOOKEEPER=@NAME) takes hosts, TLS files, credentials and ACL from
it. zklock reads the first of:
  --config FILE, $ZKLOCK_CONFIG
  $XDG_CONFIG_HOME/zklock/config.toml (or ~/.config/zklock/config.toml)
  /etc/zklock/config.toml
Flags and ZKLOCK_* variables override its values; -z HOSTS given directly
uses no ensemble of the file. Every key:

  default = "prod"

  [ensembles.prod]
  hosts = "zk1.example.com:2281,zk2.example.com:2281/apps"
  session-timeout = "15s"
  connect-timeout = "10s"
  tls-ca = "/etc/zklock/ca.pem"
  tls-cert = "/etc/zklock/client.pem"
  tls-key = "/etc/zklock/client.key"
  sasl-user = "backup"
  password-file = "/etc/zklock/prod.password"
  acl = ["creator", "world:anyone:r"]

  [ensembles.dev]
  hosts = "127.0.0.1:2181"
  digest-user = "dev"
  password = "not-a-secret"
  kerberos = false
  kerberos-service = "zookeeper"
  kerberos-host = "zk1.example.com"
  jute-maxbuffer = "8M"

`default` is the ensemble used without -z; each [ensembles.NAME] needs
`hosts`, and its other keys are the flags of the same name. Relative paths
are relative to the file. `password` is accepted only in a file that group
and others cannot read (chmod 600); an unknown key is refused with the file
and line (exit 64)."#;

/// ENVIRONMENT: the variables clap does not read (the others are listed
/// from the options' `env`): `ZKLOCK_ZOOKEEPER` is resolved with the
/// settings, and the password has no flag.
pub const OTHER_VARIABLES: &str = "  ZKLOCK_ZOOKEEPER         the same as --zookeeper
  ZKLOCK_PASSWORD          the password for --sasl-user or --digest-user,
                           when no --password-file is given; never printed";

/// JSON OUTPUT of `zklock status --json`.
pub const STATUS_JSON: &str = r#"One document, {"locks": [LOCK...]}, one LOCK per path in the order given.
Field names are stable; new fields may be added.

LOCK:
  path           the lock path as given
  kind           free, exclusive, shared or semaphore
  held           whether anyone holds it
  limit          semaphores only: the number of holders allowed
  permits_used   semaphores only: leases held
  holders        ENTRY list, in queue order
  waiting        ENTRY list, in queue order
  last_run       the --once-per run record's last run (RUN), if any
  last_success   the record's last successful run (RUN), if any
  unprotected    why anyone may delete the lock's nodes (its directory's
                 ACL grants DELETE to world:anyone while the ACL in force
                 does not), if so

ENTRY:
  node           the node's name (under PATH; a semaphore's under
                 PATH/leases or PATH/locks)
  kind           lock, read, write or lease
  position       1 for the first holder, counting on through the queue
  client         zklock, curator or kazoo
  fencing_token  the node's czxid
  session_id     the owner session, hex (0x...)
  since          RFC 3339 UTC, server clock: when it took the lock (zklock
                 holders) or queued
  held_seconds   seconds since `since` (this host's clock), for holders
  waited_seconds seconds since `since` (this host's clock), for waiters
  holder         a zklock node's data: host, pid (the command's once it
                 runs), zklock_pid, user, command or label, version, acquired,
                 ci (CI) when it runs in a CI job, and hold (HOLD) for a
                 `zklock hold`
  data           another client's node data, as text

CI:
  provider       github-actions, gitlab, jenkins, buildkite or circleci
  url            the job's (or run's, build's) web page

HOLD:
  bound_pid, bound_name  the process whose exit releases it (absent with
                 --until-released)
  until          --max-hold's end, RFC 3339 (the holder's clock)

RUN:
  start_ms, start  when the run started (server clock; ms, RFC 3339)
  end_ms, end      start plus the run's duration measured on its host
  host, user       where and as whom it ran
  exit_status      zklock's exit status for that run
  fencing_token    the run's fencing token"#;

/// JSON OUTPUT of `zklock list --json`.
pub const LIST_JSON: &str = r#"One document, {"locks": [LOCK...]}, in bytewise path order. Field names
are stable; new fields may be added.

LOCK:
  path                 the lock path
  kind                 exclusive, shared or semaphore
  limit                semaphores only
  holders              the number of holders
  waiting              the number of waiters
  oldest_held_seconds  how long the longest holder has held it (when held)"#;

/// METRICS: what `run --metrics-file FILE` writes.
pub const METRICS: &str = r#"--metrics-file FILE writes, at every exit after FILE was checked (signals
and errors included), a Prometheus text file for node_exporter's textfile
collector (which reads only *.prom): into a temporary file .NAME.PID.tmp in
the same directory, then renamed over FILE. All metrics are gauges
labelled `path` (the lock paths as given, separated by spaces):

  zklock_outcome{path,outcome}
      1 for this run's outcome, 0 for the others: ran (the command ran,
      whatever its status), skipped (--once-per), not-acquired (timeout,
      -n, or a signal while waiting), lost (76), timed-out (124), error
  zklock_exit_status
      zklock's exit status
  zklock_wait_seconds
      seconds from start until the lock was held (or zklock gave up)
  zklock_held_seconds
      seconds the lock was held (0 if never)
  zklock_fencing_token
      the lock node's czxid (the first PATH given); absent if not acquired
  zklock_ping_failures
      with --ping: the health-check pings of this run that failed
  zklock_last_success_timestamp_seconds
      when the last successful run started: from the record with
      --once-per (server clock), otherwise this run's acquisition if it
      exited 0 (host clock), else carried over from the previous file;
      absent if never known

An alert on time() - zklock_last_success_timestamp_seconds > 26*3600
catches a nightly job that has not succeeded anywhere for a night."#;
