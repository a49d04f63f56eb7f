# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_zklock_global_optspecs
    string join \n h/help V/version
end

function __fish_zklock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_zklock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_zklock_using_subcommand
    set -l cmd (__fish_zklock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c zklock -n "__fish_zklock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_needs_command" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "run" -d 'Take the lock at PATH, run the command, release the lock.'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "hold" -d 'Take the lock at PATH and keep it for the calling shell\'s next steps.'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "release" -d 'Release a lock taken by `zklock hold`, and wait for ZooKeeper\'s answer.'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "status" -d 'Show who holds each lock and who waits, in queue order.'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "list" -d 'List every lock under PREFIX (default /), recursively.'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "break" -d 'Delete the node of a lock\'s current holder (or the node named).'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "completions" -d 'Print the completion script for SHELL on stdout.'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "man" -d 'Print the man page of zklock, or of one subcommand, as roff.'
complete -c zklock -n "__fish_zklock_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c zklock -n "__fish_zklock_using_subcommand run" -l label -d 'Store TEXT (a CI job URL, "nightly backup") in the lock node instead of the command line. Node data is readable by every client that can read PATH and shown by every run that finds the lock held: use this when the command line carries secrets' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -s z -l zookeeper -d 'ZooKeeper servers: comma-separated host:port list with an optional /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`; or `@NAME`, an ensemble of the config file. [env: ZKLOCK_ZOOKEEPER] [default: the config file\'s `default` ensemble, else 127.0.0.1:2181]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l session-timeout -d 'Session timeout to ask the ensemble for; the lock is released at most this long after zklock dies or is cut off. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l connect-timeout -d 'Give up (exit 69) if no session is established within DURATION. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l jute-maxbuffer -d 'The largest packet accepted from a server: a longer one ends the connection before it is read. Raise it for an ensemble whose jute.maxbuffer is raised beyond it. BYTES: a number, or with K or M (KiB, MiB). [default: 4M]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l config -d 'The config file. [default: $XDG_CONFIG_HOME/zklock/config.toml or ~/.config/zklock/config.toml, else /etc/zklock/config.toml, if present]' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand run" -l tls-ca -d 'Connect over TLS, verifying the servers (and their host names) against the CA certificates in FILE (PEM)' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand run" -l tls-cert -d 'Present this client certificate (PEM) for mutual TLS; the server knows us as `x509:<subject DN>`. Needs --tls-key' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand run" -l tls-key -d 'The private key (PEM) of --tls-cert' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand run" -l sasl-user -d 'Authenticate with SASL DIGEST-MD5 as USER (the server knows us as `sasl:USER`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l digest-user -d 'Authenticate with the `digest` scheme as USER (zkCli\'s `addauth digest USER:PASSWORD`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l password-file -d 'Read the password of --sasl-user or --digest-user from FILE (its first line). Without it: the ZKLOCK_PASSWORD environment variable. Passwords are never taken from the command line' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand run" -l kerberos -d 'Authenticate with Kerberos (SASL GSSAPI) from the ticket cache (`kinit`, `k5start`). Needs a zklock built with `--features kerberos`. `--kerberos=false` (or ZKLOCK_KERBEROS=0) turns off the config file\'s `kerberos = true`' -r -f -a "true\t''
false\t''"
complete -c zklock -n "__fish_zklock_using_subcommand run" -l kerberos-service -d 'The service part of the servers\' Kerberos principal (SERVICE/host@REALM). [default: zookeeper]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l kerberos-host -d 'The host part of the servers\' Kerberos principal. [default: the host zklock connects to]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l acl -d 'The ACL of every node zklock creates, in zkCli\'s syntax SCHEME:ID:PERMS (e.g. `sasl:backup:cdrwa`, `world:anyone:r`); repeat it for several entries (ZKLOCK_ACL separates them with `;`). `creator` = all permissions for the identities we authenticate as, `open` = all permissions for everyone. Our own identity needs READ, CREATE, DELETE and WRITE. [default: `creator` plus `world:anyone:r` with credentials, else `open`]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l limit -d 'Let up to N commands hold PATH at once (a semaphore). N is recorded in PATH; every user of the path must ask for the same N' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -s w -l timeout -d 'Give up if the lock is not acquired within DURATION (`30s`, `2m`, or a number of seconds such as `0.5`). Default: wait forever' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l max-waiting -d 'Wait for the lock only if fewer than N runs are waiting ahead (holders do not count); otherwise give up at once (exit as -E), saying how many wait. 0 takes a free lock and never waits. Runs arriving together may each count the others: more of them may give up than needed, but none while fewer than N are ahead of it. Checked for each PATH as it is queued for (again after a lost session)' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -s E -l conflict-exit-code -d 'Exit status when the lock is not acquired (0-255)' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l on-disconnect -d 'What a lost connection means while the command runs: `lease` keeps it running while the session can still come back (until the lease deadline); `kill` treats any disconnection as losing the lock' -r -f -a "lease\t'Keep running until the lease deadline while the session reconnects'
kill\t'Any disconnection loses the lock'"
complete -c zklock -n "__fish_zklock_using_subcommand run" -l once-per -d 'Run at most once per DURATION (e.g. `20h`): once the lock is held, skip the command (exit as -E) if the last successful run of PATH started less than DURATION before now, both times read from the ZooKeeper server\'s clock. Runs are recorded in PATH/zklock.record' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l retry-after -d 'With --once-per: after a failed run, skip the command (exit as -E) until DURATION has passed since that run started (server clock), so that hosts firing meanwhile do not retry it back to back; make it longer than the job runs. Default 0: the next firing of any host retries at once, as plain cron would, so another host takes over from a failure that only one host has' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l metrics-file -d 'At exit, write a Prometheus text-format report of the run (for node_exporter\'s textfile collector) to FILE, atomically' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand run" -l ping -d 'Health-check pings (healthchecks.io protocol): the host that runs the command sends URL/start as it starts it, then URL for exit 0 or URL/N for exit status N (the suffix goes before any ?query). Hosts that do not run it send nothing. Bounded (10s), never changes the exit status; a failure is one line. The URL is a secret: only its scheme and host are ever printed' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -s c -l command -d 'Run STRING with `$SHELL -c` (falling back to /bin/sh) instead of CMD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l kill-after -d 'After forwarding a terminating signal, or when the lock is lost, kill the command\'s process group if it is still running after DURATION. Default: the largest value that fits the session the ensemble grants, at most 5s (`-v` says which). A value given here that does not fit is refused (exit 64)' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -l max-runtime -d 'Send SIGTERM to the command\'s process group after it has run for DURATION (waiting for the lock does not count), SIGKILL --kill-after later; zklock then exits 124. 0 means no limit, as in timeout(1)' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand run" -s x -l exclusive -d 'Take an exclusive lock (the default): no other holder of any kind'
complete -c zklock -n "__fish_zklock_using_subcommand run" -s s -l shared -d 'Take a shared (read) lock: other readers may hold it at the same time, exclusive and write holders may not'
complete -c zklock -n "__fish_zklock_using_subcommand run" -l write -d 'Take a write lock (Curator\'s `__WRIT__` node), for sharing a path with users of Curator\'s read/write lock; otherwise the same as --exclusive'
complete -c zklock -n "__fish_zklock_using_subcommand run" -s n -l no-wait -d 'Give up at once if the lock is held (same as --timeout 0)'
complete -c zklock -n "__fish_zklock_using_subcommand run" -l supersede -d 'When this run queues, remove from the queue every older run on PATH that is still waiting and was started with --supersede too (each exits as -E, naming this run): the newest run goes next. The holder, other waiters and other clients\' nodes are never touched. Exclusive and write locks on one PATH only'
complete -c zklock -n "__fish_zklock_using_subcommand run" -l ping-skipped -d 'With --ping: a host that does not run the command because the lock is held elsewhere or the job ran successfully recently (exit as -E) sends a plain URL ping too (a heartbeat from every host). A host that skips because the last run failed (--retry-after) sends nothing, so the check stays failed: the failing host reported it once'
complete -c zklock -n "__fish_zklock_using_subcommand run" -s v -l verbose -d 'Report the connection, the queue position and who holds the lock'
complete -c zklock -n "__fish_zklock_using_subcommand run" -s q -l quiet -d 'Print errors only'
complete -c zklock -n "__fish_zklock_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_using_subcommand run" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l label -d 'Store TEXT (a CI job URL, "nightly backup") in the lock node instead of the command line. Node data is readable by every client that can read PATH and shown by every run that finds the lock held: use this when the command line carries secrets' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s z -l zookeeper -d 'ZooKeeper servers: comma-separated host:port list with an optional /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`; or `@NAME`, an ensemble of the config file. [env: ZKLOCK_ZOOKEEPER] [default: the config file\'s `default` ensemble, else 127.0.0.1:2181]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l session-timeout -d 'Session timeout to ask the ensemble for; the lock is released at most this long after zklock dies or is cut off. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l connect-timeout -d 'Give up (exit 69) if no session is established within DURATION. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l jute-maxbuffer -d 'The largest packet accepted from a server: a longer one ends the connection before it is read. Raise it for an ensemble whose jute.maxbuffer is raised beyond it. BYTES: a number, or with K or M (KiB, MiB). [default: 4M]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l config -d 'The config file. [default: $XDG_CONFIG_HOME/zklock/config.toml or ~/.config/zklock/config.toml, else /etc/zklock/config.toml, if present]' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l tls-ca -d 'Connect over TLS, verifying the servers (and their host names) against the CA certificates in FILE (PEM)' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l tls-cert -d 'Present this client certificate (PEM) for mutual TLS; the server knows us as `x509:<subject DN>`. Needs --tls-key' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l tls-key -d 'The private key (PEM) of --tls-cert' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l sasl-user -d 'Authenticate with SASL DIGEST-MD5 as USER (the server knows us as `sasl:USER`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l digest-user -d 'Authenticate with the `digest` scheme as USER (zkCli\'s `addauth digest USER:PASSWORD`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l password-file -d 'Read the password of --sasl-user or --digest-user from FILE (its first line). Without it: the ZKLOCK_PASSWORD environment variable. Passwords are never taken from the command line' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l kerberos -d 'Authenticate with Kerberos (SASL GSSAPI) from the ticket cache (`kinit`, `k5start`). Needs a zklock built with `--features kerberos`. `--kerberos=false` (or ZKLOCK_KERBEROS=0) turns off the config file\'s `kerberos = true`' -r -f -a "true\t''
false\t''"
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l kerberos-service -d 'The service part of the servers\' Kerberos principal (SERVICE/host@REALM). [default: zookeeper]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l kerberos-host -d 'The host part of the servers\' Kerberos principal. [default: the host zklock connects to]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l acl -d 'The ACL of every node zklock creates, in zkCli\'s syntax SCHEME:ID:PERMS (e.g. `sasl:backup:cdrwa`, `world:anyone:r`); repeat it for several entries (ZKLOCK_ACL separates them with `;`). `creator` = all permissions for the identities we authenticate as, `open` = all permissions for everyone. Our own identity needs READ, CREATE, DELETE and WRITE. [default: `creator` plus `world:anyone:r` with credentials, else `open`]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l limit -d 'Let up to N commands hold PATH at once (a semaphore). N is recorded in PATH; every user of the path must ask for the same N' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s w -l timeout -d 'Give up if the lock is not acquired within DURATION (`30s`, `2m`, or a number of seconds such as `0.5`). Default: wait forever' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l max-waiting -d 'Wait for the lock only if fewer than N runs are waiting ahead (holders do not count); otherwise give up at once (exit as -E), saying how many wait. 0 takes a free lock and never waits. Runs arriving together may each count the others: more of them may give up than needed, but none while fewer than N are ahead of it. Checked for each PATH as it is queued for (again after a lost session)' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s E -l conflict-exit-code -d 'Exit status when the lock is not acquired (0-255)' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l on-disconnect -d 'What a lost connection means while the command runs: `lease` keeps it running while the session can still come back (until the lease deadline); `kill` treats any disconnection as losing the lock' -r -f -a "lease\t'Keep running until the lease deadline while the session reconnects'
kill\t'Any disconnection loses the lock'"
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l once-per -d 'Run at most once per DURATION (e.g. `20h`): once the lock is held, skip the command (exit as -E) if the last successful run of PATH started less than DURATION before now, both times read from the ZooKeeper server\'s clock. Runs are recorded in PATH/zklock.record' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l retry-after -d 'With --once-per: after a failed run, skip the command (exit as -E) until DURATION has passed since that run started (server clock), so that hosts firing meanwhile do not retry it back to back; make it longer than the job runs. Default 0: the next firing of any host retries at once, as plain cron would, so another host takes over from a failure that only one host has' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l metrics-file -d 'At exit, write a Prometheus text-format report of the run (for node_exporter\'s textfile collector) to FILE, atomically' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l ping -d 'Health-check pings (healthchecks.io protocol): the host that runs the command sends URL/start as it starts it, then URL for exit 0 or URL/N for exit status N (the suffix goes before any ?query). Hosts that do not run it send nothing. Bounded (10s), never changes the exit status; a failure is one line. The URL is a secret: only its scheme and host are ever printed' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l format -d 'How to print the variables: `sh` (export lines for eval), `json` (one object), or `github-env` (lines for "$GITHUB_ENV")' -r -f -a "sh\t''
json\t''
github-env\t''"
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l max-hold -d 'Release the lock after DURATION at the latest (`1h`); with steps still running, that counts as losing the lock (they are stopped)' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l kill-after -d 'When the steps are stopped (a lost lock, --max-hold, a signal to the holder), KILL those still running DURATION after their TERM. Default: the largest value that fits the session the ensemble grants, at most 5s (`-v` says which). A value that does not fit is refused (exit 64)' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l on-lost -d 'What a lost lock does to the steps: `term` stops them, TERM then KILL after --kill-after, before the lock is released (the default when bound to the calling process); `none` leaves them alone (the default with --until-released; `zklock release` then exits 76)' -r -f -a "term\t''
none\t''"
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s x -l exclusive -d 'Take an exclusive lock (the default): no other holder of any kind'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s s -l shared -d 'Take a shared (read) lock: other readers may hold it at the same time, exclusive and write holders may not'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l write -d 'Take a write lock (Curator\'s `__WRIT__` node), for sharing a path with users of Curator\'s read/write lock; otherwise the same as --exclusive'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s n -l no-wait -d 'Give up at once if the lock is held (same as --timeout 0)'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l supersede -d 'When this run queues, remove from the queue every older run on PATH that is still waiting and was started with --supersede too (each exits as -E, naming this run): the newest run goes next. The holder, other waiters and other clients\' nodes are never touched. Exclusive and write locks on one PATH only'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l ping-skipped -d 'With --ping: a host that does not run the command because the lock is held elsewhere or the job ran successfully recently (exit as -E) sends a plain URL ping too (a heartbeat from every host). A host that skips because the last run failed (--retry-after) sends nothing, so the check stays failed: the failing host reported it once'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s v -l verbose -d 'Report the connection, the queue position and who holds the lock'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s q -l quiet -d 'Print errors only'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -l until-released -d 'Hold the lock until `zklock release` (by ZKLOCK_HOLD, or by PATH from the same CI job or session on this host), not only while the calling process lives: for CI jobs whose steps are separate shells. Needs --max-hold'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_using_subcommand hold" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_using_subcommand release" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_using_subcommand status" -s z -l zookeeper -d 'ZooKeeper servers: comma-separated host:port list with an optional /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`; or `@NAME`, an ensemble of the config file. [env: ZKLOCK_ZOOKEEPER] [default: the config file\'s `default` ensemble, else 127.0.0.1:2181]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l session-timeout -d 'Session timeout to ask the ensemble for; the lock is released at most this long after zklock dies or is cut off. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l connect-timeout -d 'Give up (exit 69) if no session is established within DURATION. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l jute-maxbuffer -d 'The largest packet accepted from a server: a longer one ends the connection before it is read. Raise it for an ensemble whose jute.maxbuffer is raised beyond it. BYTES: a number, or with K or M (KiB, MiB). [default: 4M]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l config -d 'The config file. [default: $XDG_CONFIG_HOME/zklock/config.toml or ~/.config/zklock/config.toml, else /etc/zklock/config.toml, if present]' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand status" -l tls-ca -d 'Connect over TLS, verifying the servers (and their host names) against the CA certificates in FILE (PEM)' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand status" -l tls-cert -d 'Present this client certificate (PEM) for mutual TLS; the server knows us as `x509:<subject DN>`. Needs --tls-key' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand status" -l tls-key -d 'The private key (PEM) of --tls-cert' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand status" -l sasl-user -d 'Authenticate with SASL DIGEST-MD5 as USER (the server knows us as `sasl:USER`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l digest-user -d 'Authenticate with the `digest` scheme as USER (zkCli\'s `addauth digest USER:PASSWORD`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l password-file -d 'Read the password of --sasl-user or --digest-user from FILE (its first line). Without it: the ZKLOCK_PASSWORD environment variable. Passwords are never taken from the command line' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand status" -l kerberos -d 'Authenticate with Kerberos (SASL GSSAPI) from the ticket cache (`kinit`, `k5start`). Needs a zklock built with `--features kerberos`. `--kerberos=false` (or ZKLOCK_KERBEROS=0) turns off the config file\'s `kerberos = true`' -r -f -a "true\t''
false\t''"
complete -c zklock -n "__fish_zklock_using_subcommand status" -l kerberos-service -d 'The service part of the servers\' Kerberos principal (SERVICE/host@REALM). [default: zookeeper]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l kerberos-host -d 'The host part of the servers\' Kerberos principal. [default: the host zklock connects to]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l acl -d 'The ACL of every node zklock creates, in zkCli\'s syntax SCHEME:ID:PERMS (e.g. `sasl:backup:cdrwa`, `world:anyone:r`); repeat it for several entries (ZKLOCK_ACL separates them with `;`). `creator` = all permissions for the identities we authenticate as, `open` = all permissions for everyone. Our own identity needs READ, CREATE, DELETE and WRITE. [default: `creator` plus `world:anyone:r` with credentials, else `open`]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand status" -l json -d 'Print one JSON document instead of text (fields: zklock-status(1))'
complete -c zklock -n "__fish_zklock_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_using_subcommand status" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_using_subcommand list" -s z -l zookeeper -d 'ZooKeeper servers: comma-separated host:port list with an optional /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`; or `@NAME`, an ensemble of the config file. [env: ZKLOCK_ZOOKEEPER] [default: the config file\'s `default` ensemble, else 127.0.0.1:2181]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l session-timeout -d 'Session timeout to ask the ensemble for; the lock is released at most this long after zklock dies or is cut off. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l connect-timeout -d 'Give up (exit 69) if no session is established within DURATION. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l jute-maxbuffer -d 'The largest packet accepted from a server: a longer one ends the connection before it is read. Raise it for an ensemble whose jute.maxbuffer is raised beyond it. BYTES: a number, or with K or M (KiB, MiB). [default: 4M]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l config -d 'The config file. [default: $XDG_CONFIG_HOME/zklock/config.toml or ~/.config/zklock/config.toml, else /etc/zklock/config.toml, if present]' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand list" -l tls-ca -d 'Connect over TLS, verifying the servers (and their host names) against the CA certificates in FILE (PEM)' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand list" -l tls-cert -d 'Present this client certificate (PEM) for mutual TLS; the server knows us as `x509:<subject DN>`. Needs --tls-key' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand list" -l tls-key -d 'The private key (PEM) of --tls-cert' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand list" -l sasl-user -d 'Authenticate with SASL DIGEST-MD5 as USER (the server knows us as `sasl:USER`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l digest-user -d 'Authenticate with the `digest` scheme as USER (zkCli\'s `addauth digest USER:PASSWORD`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l password-file -d 'Read the password of --sasl-user or --digest-user from FILE (its first line). Without it: the ZKLOCK_PASSWORD environment variable. Passwords are never taken from the command line' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand list" -l kerberos -d 'Authenticate with Kerberos (SASL GSSAPI) from the ticket cache (`kinit`, `k5start`). Needs a zklock built with `--features kerberos`. `--kerberos=false` (or ZKLOCK_KERBEROS=0) turns off the config file\'s `kerberos = true`' -r -f -a "true\t''
false\t''"
complete -c zklock -n "__fish_zklock_using_subcommand list" -l kerberos-service -d 'The service part of the servers\' Kerberos principal (SERVICE/host@REALM). [default: zookeeper]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l kerberos-host -d 'The host part of the servers\' Kerberos principal. [default: the host zklock connects to]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l acl -d 'The ACL of every node zklock creates, in zkCli\'s syntax SCHEME:ID:PERMS (e.g. `sasl:backup:cdrwa`, `world:anyone:r`); repeat it for several entries (ZKLOCK_ACL separates them with `;`). `creator` = all permissions for the identities we authenticate as, `open` = all permissions for everyone. Our own identity needs READ, CREATE, DELETE and WRITE. [default: `creator` plus `world:anyone:r` with credentials, else `open`]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand list" -l json -d 'Print one JSON document instead of text (fields: zklock-list(1))'
complete -c zklock -n "__fish_zklock_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_using_subcommand list" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_using_subcommand break" -l node -d 'Delete this node of PATH (a name shown by `zklock status`, or its full path) instead of the current holder\'s' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -s z -l zookeeper -d 'ZooKeeper servers: comma-separated host:port list with an optional /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`; or `@NAME`, an ensemble of the config file. [env: ZKLOCK_ZOOKEEPER] [default: the config file\'s `default` ensemble, else 127.0.0.1:2181]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l session-timeout -d 'Session timeout to ask the ensemble for; the lock is released at most this long after zklock dies or is cut off. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l connect-timeout -d 'Give up (exit 69) if no session is established within DURATION. [default: 10s]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l jute-maxbuffer -d 'The largest packet accepted from a server: a longer one ends the connection before it is read. Raise it for an ensemble whose jute.maxbuffer is raised beyond it. BYTES: a number, or with K or M (KiB, MiB). [default: 4M]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l config -d 'The config file. [default: $XDG_CONFIG_HOME/zklock/config.toml or ~/.config/zklock/config.toml, else /etc/zklock/config.toml, if present]' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand break" -l tls-ca -d 'Connect over TLS, verifying the servers (and their host names) against the CA certificates in FILE (PEM)' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand break" -l tls-cert -d 'Present this client certificate (PEM) for mutual TLS; the server knows us as `x509:<subject DN>`. Needs --tls-key' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand break" -l tls-key -d 'The private key (PEM) of --tls-cert' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand break" -l sasl-user -d 'Authenticate with SASL DIGEST-MD5 as USER (the server knows us as `sasl:USER`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l digest-user -d 'Authenticate with the `digest` scheme as USER (zkCli\'s `addauth digest USER:PASSWORD`); the password comes from --password-file or ZKLOCK_PASSWORD' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l password-file -d 'Read the password of --sasl-user or --digest-user from FILE (its first line). Without it: the ZKLOCK_PASSWORD environment variable. Passwords are never taken from the command line' -r -F
complete -c zklock -n "__fish_zklock_using_subcommand break" -l kerberos -d 'Authenticate with Kerberos (SASL GSSAPI) from the ticket cache (`kinit`, `k5start`). Needs a zklock built with `--features kerberos`. `--kerberos=false` (or ZKLOCK_KERBEROS=0) turns off the config file\'s `kerberos = true`' -r -f -a "true\t''
false\t''"
complete -c zklock -n "__fish_zklock_using_subcommand break" -l kerberos-service -d 'The service part of the servers\' Kerberos principal (SERVICE/host@REALM). [default: zookeeper]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l kerberos-host -d 'The host part of the servers\' Kerberos principal. [default: the host zklock connects to]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l acl -d 'The ACL of every node zklock creates, in zkCli\'s syntax SCHEME:ID:PERMS (e.g. `sasl:backup:cdrwa`, `world:anyone:r`); repeat it for several entries (ZKLOCK_ACL separates them with `;`). `creator` = all permissions for the identities we authenticate as, `open` = all permissions for everyone. Our own identity needs READ, CREATE, DELETE and WRITE. [default: `creator` plus `world:anyone:r` with credentials, else `open`]' -r -f
complete -c zklock -n "__fish_zklock_using_subcommand break" -l record -d 'Delete PATH\'s run record (PATH/zklock.record, written by `run --once-per`) instead of a lock node: the next run then runs'
complete -c zklock -n "__fish_zklock_using_subcommand break" -s y -l yes -d 'Do not ask; required when stdin is not a terminal'
complete -c zklock -n "__fish_zklock_using_subcommand break" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_using_subcommand break" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_using_subcommand completions" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_using_subcommand man" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c zklock -n "__fish_zklock_using_subcommand man" -s V -l version -d 'Print version'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "run" -d 'Take the lock at PATH, run the command, release the lock.'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "hold" -d 'Take the lock at PATH and keep it for the calling shell\'s next steps.'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "release" -d 'Release a lock taken by `zklock hold`, and wait for ZooKeeper\'s answer.'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "status" -d 'Show who holds each lock and who waits, in queue order.'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "list" -d 'List every lock under PREFIX (default /), recursively.'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "break" -d 'Delete the node of a lock\'s current holder (or the node named).'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "completions" -d 'Print the completion script for SHELL on stdout.'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "man" -d 'Print the man page of zklock, or of one subcommand, as roff.'
complete -c zklock -n "__fish_zklock_using_subcommand help; and not __fish_seen_subcommand_from run hold release status list break completions man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
