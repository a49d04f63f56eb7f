//! The CI job this zklock runs in, from its provider's documented
//! environment (docs/design.md, "Holder data").

use serde::{Deserialize, Serialize};

/// The CI job a zklock runs in, from its provider's documented environment
/// (docs/design.md, "Holder data"): a waiter's log then links to the job
/// it waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CiJob {
    /// `github-actions`, `gitlab`, `jenkins`, `buildkite` or `circleci`.
    pub provider: String,
    pub url: String,
}

impl CiJob {
    /// The job named by the variables `var` gives (None for unset, empty or
    /// not UTF-8), or None outside a CI job we know. Each provider is
    /// recognised by its own marker variable, so that a URL variable left
    /// over from elsewhere (`BUILD_URL` is a common name) names no job.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<CiJob> {
        let var = |name: &str| var(name).filter(|value| !value.is_empty());
        let is_true = |name: &str| var(name).as_deref() == Some("true");
        let job = |provider: &str, url: Option<String>| {
            url.map(|url| CiJob {
                provider: provider.to_owned(),
                url,
            })
        };
        if is_true("GITHUB_ACTIONS") {
            let run = match (
                var("GITHUB_SERVER_URL"),
                var("GITHUB_REPOSITORY"),
                var("GITHUB_RUN_ID"),
            ) {
                (Some(server), Some(repository), Some(run)) => Some(format!(
                    "{}/{repository}/actions/runs/{run}{}",
                    server.trim_end_matches('/'),
                    // A re-run keeps the run's id: the attempt's own page
                    // is the one that ran this.
                    (var("GITHUB_RUN_ATTEMPT"))
                        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
                        .map(|n| format!("/attempts/{n}"))
                        .unwrap_or_default()
                )),
                _ => None,
            };
            return job("github-actions", run);
        }
        if is_true("GITLAB_CI") {
            return job("gitlab", var("CI_JOB_URL"));
        }
        if is_true("BUILDKITE") {
            return job("buildkite", var("BUILDKITE_BUILD_URL"));
        }
        if is_true("CIRCLECI") {
            return job("circleci", var("CIRCLE_BUILD_URL"));
        }
        // Jenkins sets no `true` marker; its URL and home are always set.
        if var("JENKINS_URL").is_some() || var("JENKINS_HOME").is_some() {
            return job("jenkins", var("BUILD_URL"));
        }
        None
    }

    /// What tells this CI job from any other on the host, for the owner of
    /// a hold (docs/design.md, "Holds"): the job's URL, where it names one
    /// job; the run's or build's URL and the variables that tell its jobs
    /// apart where it does not (GitHub's run holds every job of a
    /// workflow, a matrix's jobs share a name, a host may have several
    /// runners; a Buildkite build holds several jobs).
    pub fn job_identity(var: impl Fn(&str) -> Option<String>) -> Option<String> {
        let job = CiJob::from_env(&var)?;
        let extra: &[&str] = match job.provider.as_str() {
            "github-actions" => &["GITHUB_JOB", "RUNNER_NAME"],
            "buildkite" => &["BUILDKITE_JOB_ID"],
            _ => &[],
        };
        let mut identity = format!("{} {}", job.provider, job.url);
        for name in extra {
            identity.push_str(&format!(" {name}={}", var(name).unwrap_or_default()));
        }
        Some(identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from_env` over exactly these variables.
    fn ci(vars: &[(&str, &str)]) -> Option<(String, String)> {
        let found = CiJob::from_env(|name| {
            (vars.iter())
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        });
        found.map(|job| (job.provider, job.url))
    }

    fn job(provider: &str, url: &str) -> Option<(String, String)> {
        Some((provider.to_owned(), url.to_owned()))
    }

    #[test]
    fn ci_jobs_from_each_providers_variables() {
        let github = [
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "octo/app"),
            ("GITHUB_RUN_ID", "1234"),
        ];
        let run = "https://github.com/octo/app/actions/runs/1234";
        assert_eq!(ci(&github), job("github-actions", run));
        // GitHub Enterprise Server: its own server URL.
        let mut ghes = github;
        ghes[1].1 = "https://git.corp.example/";
        assert_eq!(
            ci(&ghes),
            job(
                "github-actions",
                "https://git.corp.example/octo/app/actions/runs/1234"
            )
        );
        for missing in 1..github.len() {
            let mut partial = github.to_vec();
            partial[missing].1 = "";
            assert_eq!(ci(&partial), None, "{} empty", github[missing].0);
            partial.remove(missing);
            assert_eq!(ci(&partial), None, "without {}", github[missing].0);
        }
        assert_eq!(ci(&github[1..]), None, "GITHUB_ACTIONS unset");
        // A re-run is its own attempt: its page, not the first attempt's.
        let attempt =
            |n: &'static str| ci(&[github.as_slice(), &[("GITHUB_RUN_ATTEMPT", n)]].concat());
        let second = "https://github.com/octo/app/actions/runs/1234/attempts/2";
        assert_eq!(attempt("2"), job("github-actions", second));
        assert_eq!(
            attempt("1"),
            job("github-actions", &format!("{run}/attempts/1"))
        );
        // Empty or not a number: the run's page.
        assert_eq!(attempt(""), job("github-actions", run));
        assert_eq!(attempt("2x"), job("github-actions", run));

        let gitlab_job = "https://gitlab.com/g/p/-/jobs/42";
        assert_eq!(
            ci(&[("GITLAB_CI", "true"), ("CI_JOB_URL", gitlab_job)]),
            job("gitlab", gitlab_job)
        );
        assert_eq!(ci(&[("GITLAB_CI", "true"), ("CI_JOB_URL", "")]), None);
        assert_eq!(ci(&[("CI_JOB_URL", gitlab_job)]), None);

        let jenkins_build = "https://ci.example/job/deploy/17/";
        for marker in ["JENKINS_URL", "JENKINS_HOME"] {
            assert_eq!(
                ci(&[(marker, "x"), ("BUILD_URL", jenkins_build)]),
                job("jenkins", jenkins_build)
            );
        }
        assert_eq!(ci(&[("BUILD_URL", jenkins_build)]), None);
        assert_eq!(
            ci(&[("JENKINS_URL", ""), ("BUILD_URL", jenkins_build)]),
            None
        );
        assert_eq!(ci(&[("JENKINS_URL", "x")]), None);

        let buildkite_build = "https://buildkite.com/acme/app/builds/88";
        assert_eq!(
            ci(&[
                ("BUILDKITE", "true"),
                ("BUILDKITE_BUILD_URL", buildkite_build)
            ]),
            job("buildkite", buildkite_build)
        );
        assert_eq!(ci(&[("BUILDKITE_BUILD_URL", buildkite_build)]), None);

        let circle_build = "https://circleci.com/gh/acme/app/99";
        assert_eq!(
            ci(&[("CIRCLECI", "true"), ("CIRCLE_BUILD_URL", circle_build)]),
            job("circleci", circle_build)
        );
        assert_eq!(
            ci(&[("CIRCLECI", "false"), ("CIRCLE_BUILD_URL", circle_build)]),
            None
        );

        // Outside CI (a generic `CI=true` names no job).
        assert_eq!(ci(&[]), None);
        assert_eq!(ci(&[("CI", "true")]), None);
    }

    #[test]
    fn a_job_identity_tells_the_jobs_of_one_run_apart() {
        let identity = |vars: &[(&str, &str)]| {
            CiJob::job_identity(|name| {
                (vars.iter())
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| value.to_string())
            })
        };
        let run = [
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "octo/app"),
            ("GITHUB_RUN_ID", "1234"),
        ];
        let job = |name: &'static str, runner: &'static str| {
            identity(
                &[
                    run.as_slice(),
                    &[("GITHUB_JOB", name), ("RUNNER_NAME", runner)],
                ]
                .concat(),
            )
        };
        assert_eq!(job("deploy", "r1"), job("deploy", "r1"));
        assert_ne!(job("deploy", "r1"), job("test", "r1"));
        assert_ne!(job("deploy", "r1"), job("deploy", "r2"));
        let gitlab = |id: &str| {
            identity(&[
                ("GITLAB_CI", "true"),
                ("CI_JOB_URL", &format!("https://gitlab.com/g/p/-/jobs/{id}")),
            ])
        };
        assert_ne!(gitlab("1"), gitlab("2"));
        assert_eq!(identity(&[]), None);
    }
}
