//! The CI job that holds or waits (issue 23, "The job that holds the lock"):
//! a zklock run inside a CI job records the job's URL, from its provider's
//! variables, and every place that names a holder or a waiter shows it.
//! The harness clears the CI variables of the CI these tests run in from
//! every zklock it starts; each run here sets only its provider's.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{
    CI_VARIABLES, Holder, Inspector, KillOnDrop, LockLog, Scene, TempDir, assert_no_nodes,
    shared_server, unique_path, wait_for_contenders, wait_for_exit, wait_until, zklock, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// A provider's variables, its name and the URL zklock should record.
struct Provider {
    vars: &'static [(&'static str, &'static str)],
    name: &'static str,
    url: &'static str,
}

const PROVIDERS: &[Provider] = &[
    Provider {
        vars: &[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "octo/deploy"),
            ("GITHUB_RUN_ID", "9876543210"),
            ("GITHUB_RUN_ATTEMPT", "3"),
        ],
        name: "github-actions",
        url: "https://github.com/octo/deploy/actions/runs/9876543210/attempts/3",
    },
    Provider {
        vars: &[
            ("GITLAB_CI", "true"),
            ("CI", "true"),
            ("CI_JOB_URL", "https://gitlab.example/g/deploy/-/jobs/4242"),
        ],
        name: "gitlab",
        url: "https://gitlab.example/g/deploy/-/jobs/4242",
    },
    Provider {
        vars: &[
            ("JENKINS_URL", "https://jenkins.example/"),
            ("BUILD_URL", "https://jenkins.example/job/deploy/17/"),
        ],
        name: "jenkins",
        url: "https://jenkins.example/job/deploy/17/",
    },
    Provider {
        vars: &[
            ("BUILDKITE", "true"),
            (
                "BUILDKITE_BUILD_URL",
                "https://buildkite.com/acme/deploy/builds/88",
            ),
        ],
        name: "buildkite",
        url: "https://buildkite.com/acme/deploy/builds/88",
    },
    Provider {
        vars: &[
            ("CIRCLECI", "true"),
            ("CIRCLE_BUILD_URL", "https://circleci.com/gh/acme/deploy/99"),
        ],
        name: "circleci",
        url: "https://circleci.com/gh/acme/deploy/99",
    },
];

/// `zklock run -z CONNECT PATH` inside `provider`'s job (harness: no other
/// CI variable is set).
fn run_in(provider: &Provider, connect: &str, path: &str) -> Command {
    let mut cmd = zklock_run(connect, path);
    for key in CI_VARIABLES {
        assert!(cmd.get_envs().any(|(k, v)| k == *key && v.is_none()));
    }
    cmd.envs(provider.vars.iter().copied());
    cmd
}

fn output(cmd: &mut Command) -> Output {
    cmd.output().expect("run zklock")
}

fn status_json(connect: &str, path: &str) -> Value {
    let out = output(zklock().args(["status", "-z", connect, "--json", path]));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn each_providers_job_is_shown_by_status_and_by_a_run_that_gives_up() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();
    for provider in PROVIDERS {
        let path = unique_path(&format!("ci-{}", provider.name));
        let mut holder = Holder::start(&mut run_in(provider, &connect, &path), &log);
        // The acquisition write follows the command's start: until it lands
        // the node says "queued", and the refusal below names no holder.
        wait_until(LONG, "the holder's acquisition write", || {
            zk.get_data(&holder.node()).is_some_and(|(data, _)| {
                String::from_utf8_lossy(&data).contains("\"acquired\":true")
            })
        });
        let want = json!({"provider": provider.name, "url": provider.url});

        let doc = status_json(&connect, &path);
        let held = &doc["locks"][0]["holders"][0];
        assert_eq!(held["holder"]["ci"], want, "{}: {held}", provider.name);

        let text = output(zklock().args(["status", "-z", &connect, &path]));
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains(&format!(", CI job {}", provider.url)),
            "{}: {text}",
            provider.name
        );

        // Another run, outside CI, names the job that holds the lock.
        let refused = output(zklock_run(&connect, &path).args(["-n", "--", "true"]));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(75), "{stderr}");
        assert!(
            stderr.starts_with(&format!("zklock: not waiting for {path}: held by pid ")),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(", CI job {} since ", provider.url)),
            "{}: {stderr}",
            provider.name
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");

        holder.finish();
        assert_no_nodes(&zk, &path);
    }
}

/// A waiter's heartbeat (`-v`, no terminal) and the message when it times out
/// name the holder's job; `status` shows a waiter's job too.
#[test]
fn a_waiter_names_the_holders_job_and_status_names_the_waiters() {
    let s = Scene::new("ci-wait");
    let path = &s.path;
    let (gitlab, circle) = (&PROVIDERS[1], &PROVIDERS[4]);
    let mut holder = Holder::start(&mut run_in(gitlab, &s.connect, path), &s.log);
    wait_until(LONG, "the holder's acquisition write", || {
        s.zk()
            .get_data(&holder.node())
            .is_some_and(|(data, _)| String::from_utf8_lossy(&data).contains("\"acquired\":true"))
    });

    let dir = TempDir::new();
    let stderr_file = dir.path().join("stderr");
    let mut waiter = KillOnDrop(
        run_in(circle, &s.connect, path)
            .env("ZKLOCK_HEARTBEAT_INTERVAL", "200ms")
            .args(["-v", "-w", "60s", "--", "true"])
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(&stderr_file).unwrap())
            .spawn()
            .expect("spawn waiter"),
    );
    let stderr = || std::fs::read_to_string(&stderr_file).unwrap_or_default();
    let heartbeat = format!(", CI job {} for ", gitlab.url);
    wait_until(LONG, "a heartbeat naming the holder's job", || {
        stderr()
            .lines()
            .any(|l| l.contains("still waiting") && l.contains(&heartbeat))
    });
    wait_for_contenders(s.zk(), path, "-lock-", 2);
    let doc = status_json(&s.connect, path);
    let waiting = &doc["locks"][0]["waiting"][0];
    assert_eq!(
        waiting["holder"]["ci"],
        json!({"provider": circle.name, "url": circle.url}),
        "{waiting}"
    );

    // Waiting with a deadline: the message when it passes.
    let timed_out = output(s.run().args(["-w", "0.3", "--", "true"]));
    let text = String::from_utf8_lossy(&timed_out.stderr);
    assert_eq!(timed_out.status.code(), Some(75), "{text}");
    assert!(
        text.starts_with(&format!(
            "zklock: timed out waiting for {path}: held by pid "
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(", CI job {} since ", gitlab.url)),
        "{text}"
    );

    holder.finish();
    let status = wait_for_exit(&mut waiter, LONG).expect("the waiter runs");
    assert_eq!(status.code(), Some(0), "{}", stderr());
    s.assert_nothing_left();
}

/// Outside CI nothing changes: no `ci` field, nothing about a job. A
/// generic `CI=true`, or `BUILD_URL` without Jenkins' own variables, names
/// no job.
#[test]
fn outside_ci_no_job_is_recorded() {
    let s = Scene::new("ci-none");
    let mut holder = Holder::start(
        s.run()
            .env("CI", "true")
            .env("BUILD_URL", "https://not-jenkins.example/1")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_RUN_ID", ""),
        &s.log,
    );
    let (data, _) = s.zk().get_data(&holder.node()).expect("the holder's node");
    let Ok(Value::Object(fields)) = serde_json::from_slice(&data) else {
        panic!("not a JSON object: {}", String::from_utf8_lossy(&data));
    };
    assert!(fields.contains_key("host"), "{fields:?}");
    assert!(!fields.contains_key("ci"), "{fields:?}");
    let doc = status_json(&s.connect, &s.path);
    let held = &doc["locks"][0]["holders"][0];
    assert!(held["holder"].is_object(), "{held}");
    assert!(held["holder"].get("ci").is_none(), "{held}");
    let refused = output(s.run().args(["-n", "--", "true"]));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(75), "{stderr}");
    assert!(!stderr.contains("CI job"), "{stderr}");
    holder.finish();
    s.assert_nothing_left();
}
