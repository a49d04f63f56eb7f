//! `zklock completions SHELL` and `zklock man [SUBCOMMAND]`: generated at
//! run time from the clap model, so every install has them, and the files
//! committed in `completions/` are made by the same functions (a test fails
//! when they drift from the code).

use anyhow::Result;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;
use crate::exit::Exit;
use crate::report::write_stdout;

pub fn completions(shell: Shell) -> Result<Exit> {
    write_stdout(&completion_script(shell))?;
    Ok(Exit::Command(0))
}

pub fn man(subcommand: Option<&str>) -> Result<Exit> {
    write_stdout(&man_page(subcommand))?;
    Ok(Exit::Command(0))
}

pub fn completion_script(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "zklock", &mut out);
    out
}

/// zklock(1), or zklock-SUBCOMMAND(1).
pub fn man_page(subcommand: Option<&str>) -> Vec<u8> {
    let root = Cli::command();
    let page = match subcommand.and_then(|name| root.find_subcommand(name)) {
        Some(sub) => sub.clone().name(format!("zklock-{}", sub.get_name())),
        None => root,
    };
    let mut out = Vec::new();
    // Rendering into a Vec cannot fail.
    let _ = clap_mangen::Man::new(page).render(&mut out);
    out
}

#[cfg(test)]
mod generated_files {
    //! Regenerate with `ZKLOCK_REGENERATE=1 cargo test --bin zklock generated_files`.

    use std::path::Path;

    use super::*;
    use crate::cli::SUBCOMMANDS;

    fn check(file: &str, contents: &[u8]) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("completions")
            .join(file);
        if std::env::var_os("ZKLOCK_REGENERATE").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, contents).unwrap();
            return;
        }
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == contents,
            "{} is out of date; run ZKLOCK_REGENERATE=1 cargo test --bin zklock generated_files",
            path.display()
        );
    }

    #[test]
    fn completions_are_current() {
        for (shell, file) in [
            (Shell::Bash, "zklock.bash"),
            (Shell::Zsh, "_zklock"),
            (Shell::Fish, "zklock.fish"),
        ] {
            check(file, &completion_script(shell));
        }
    }

    #[test]
    fn man_pages_are_current() {
        check("zklock.1", &man_page(None));
        for name in SUBCOMMANDS {
            let page = man_page(Some(name));
            let title = format!("zklock-{name}");
            assert!(
                String::from_utf8_lossy(&page).contains(&format!(".TH {title}")),
                "{title}"
            );
            check(&format!("{title}.1"), &page);
        }
    }
}
