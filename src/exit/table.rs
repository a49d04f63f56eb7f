//! The exit status tables of `--help` and the man pages, made from
//! [`Exit`]'s codes; README's table is tested against them.

use super::{CONFLICT_DEFAULT, Exit};

/// One row of an exit status table: the exits it stands for and what
/// they mean.
pub struct Row {
    pub exits: &'static [Exit],
    /// The code column where it is not the exits' codes (`128+N`).
    pub name: Option<&'static str>,
    pub meaning: &'static str,
}

const fn row(exits: &'static [Exit], meaning: &'static str) -> Row {
    Row {
        exits,
        name: None,
        meaning,
    }
}

const fn named(name: &'static str, exits: &'static [Exit], meaning: &'static str) -> Row {
    Row {
        exits,
        name: Some(name),
        meaning,
    }
}

impl Row {
    /// The code column: `75`, `126 / 127`, or its name (`128+N`).
    pub fn code(&self) -> String {
        if let Some(name) = self.name {
            return name.to_owned();
        }
        let codes: Vec<String> = (self.exits.iter())
            .map(|exit| exit.code().to_string())
            .collect();
        codes.join(" / ")
    }
}

/// `zklock run`'s exit statuses (docs/design.md, "Exit status"): the one
/// source of its `--help` table, and so of the man pages made from it; a
/// test compares README's table with it.
pub const RUN: &[Row] = &[
    named(
        "the command's",
        &[Exit::Command(0)],
        "the command ran and exited with that status",
    ),
    named(
        "128+N",
        &[Exit::Signal(0)],
        "the command died of signal N, or zklock was interrupted by signal N \
         before it ran the command",
    ),
    row(
        &[Exit::Conflict(CONFLICT_DEFAULT)],
        "lock not acquired: --timeout expired, --no-wait found it held, \
         --max-waiting found the queue full, or a newer --supersede run took \
         this one's place; or --once-per found a recent successful run (-E \
         changes it)",
    ),
    row(
        &[Exit::LockLost],
        "lock lost while the command ran; the command was terminated",
    ),
    row(
        &[Exit::TimedOut],
        "--max-runtime expired; the command was terminated",
    ),
    row(
        &[Exit::Unavailable],
        "cannot reach the ensemble or establish a session within --connect-timeout (or before --timeout ran out)",
    ),
    row(
        &[Exit::NoPermission],
        "authentication failed or an ACL denies access",
    ),
    row(
        &[Exit::Usage],
        "usage error (bad path, duration, missing command, ...)",
    ),
    row(&[Exit::Software], "any other ZooKeeper or internal error"),
    row(
        &[Exit::NotExecutable, Exit::NotFound],
        "command not executable / not found, checked before connecting",
    ),
];

const UNAVAILABLE: Row = row(
    &[Exit::Unavailable],
    "cannot reach the ensemble within --connect-timeout",
);
const USAGE: Row = row(&[Exit::Usage], "usage error");
const SOFTWARE: Row = row(&[Exit::Software], "any other ZooKeeper or internal error");
const DENIES_READING: Row = row(
    &[Exit::NoPermission],
    "authentication failed or an ACL denies reading",
);

/// `zklock status`'s exit statuses.
pub const STATUS: &[Row] = &[
    row(
        &[Exit::Command(0)],
        "every PATH is free (no holder, no waiter)",
    ),
    row(&[Exit::Held], "at least one PATH is held or has waiters"),
    UNAVAILABLE,
    DENIES_READING,
    USAGE,
    SOFTWARE,
];

/// `zklock list`'s exit statuses.
pub const LIST: &[Row] = &[
    row(&[Exit::Command(0)], "listed (also when no lock was found)"),
    UNAVAILABLE,
    DENIES_READING,
    USAGE,
    SOFTWARE,
];

/// `zklock break`'s exit statuses.
pub const BREAK: &[Row] = &[
    row(&[Exit::Command(0)], "the node was deleted"),
    row(
        &[Exit::NotDeleted],
        "nothing deleted: the path is free, the node (or --record) does not \
         exist, or the answer at the prompt was not yes",
    ),
    row(
        &[Exit::Conflict(CONFLICT_DEFAULT)],
        "nothing deleted: the holder (or record) changed after it was shown",
    ),
    row(
        &[Exit::Usage],
        "usage error, or no terminal to ask at and no --yes",
    ),
    UNAVAILABLE,
    row(
        &[Exit::NoPermission],
        "authentication failed or an ACL denies the delete",
    ),
    SOFTWARE,
];

/// `zklock hold`'s exit statuses (docs/design.md, "Holds"): those of
/// `run` before its command.
pub const HOLD: &[Row] = &[
    row(
        &[Exit::Command(0)],
        "held: the variables are printed, and a holder keeps the lock",
    ),
    named(
        "128+N",
        &[Exit::Signal(0)],
        "interrupted by signal N while waiting",
    ),
    row(
        &[Exit::Conflict(CONFLICT_DEFAULT)],
        "lock not acquired, as for run (-E changes it)",
    ),
    UNAVAILABLE,
    row(
        &[Exit::NoPermission],
        "authentication failed or an ACL denies access",
    ),
    USAGE,
    SOFTWARE,
];

/// `zklock release`'s exit statuses (docs/design.md, "Holds").
pub const RELEASE: &[Row] = &[
    row(
        &[Exit::Command(0)],
        "released (ZooKeeper confirmed it, or could not be reached and the \
         session ends by itself)",
    ),
    row(
        &[Exit::LockLost],
        "the lock had been lost before the release (the reason is printed)",
    ),
    row(
        &[Exit::Usage],
        "usage error, or no such hold (by PATH: none of this CI job, or \
         outside CI of this session)",
    ),
    row(
        &[Exit::Unavailable],
        "the holder did not answer within the deadline (stopped or stuck): \
         the hold may still be held",
    ),
    row(&[Exit::NoPermission], "the hold is another user's"),
    SOFTWARE,
];

/// The `Exit status:` section of a `--help` text (and of a man page): the
/// codes in a column, their meanings filled to 80 columns beside them.
pub fn help(rows: &[Row]) -> String {
    const WIDTH: usize = 80;
    let column = rows.iter().map(|row| row.code().len()).max().unwrap_or(0) + 2;
    let mut out = String::from("Exit status:");
    for row in rows {
        let mut line = format!("\n  {:<column$}", row.code());
        let mut used = 2 + column;
        for word in row.meaning.split_whitespace() {
            if used > 2 + column && used + 1 + word.len() > WIDTH {
                line.push_str(&format!("\n  {:column$}", ""));
                used = 2 + column;
            }
            if used > 2 + column {
                line.push(' ');
                used += 1;
            }
            line.push_str(word);
            used += word.len();
        }
        out.push_str(&line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row shows the codes of its exits (`126 / 127`); only the
    /// command's status and signals are named instead.
    #[test]
    fn rows_show_the_codes_of_their_exits() {
        assert_eq!(RUN[9].code(), "126 / 127");
        assert_eq!(BREAK[2].code(), "75");
        for rows in [RUN, HOLD, RELEASE, STATUS, LIST, BREAK] {
            for row in rows.iter().filter(|row| row.name.is_some()) {
                assert!(
                    matches!(row.exits, [Exit::Command(_)] | [Exit::Signal(_)]),
                    "{}",
                    row.meaning
                );
            }
        }
    }

    #[test]
    fn run_table_lists_every_exit_of_run() {
        // A new variant must be placed in the table or left out here on
        // purpose.
        let of_run = |exit: &Exit| match exit {
            // `status` and `break` only, with tables of their own.
            Exit::Held | Exit::NotDeleted => false,
            Exit::Command(_)
            | Exit::Signal(_)
            | Exit::Conflict(_)
            | Exit::LockLost
            | Exit::TimedOut
            | Exit::Unavailable
            | Exit::NoPermission
            | Exit::Usage
            | Exit::Software
            | Exit::NotExecutable
            | Exit::NotFound => true,
        };
        let every = [
            Exit::Command(0),
            Exit::Signal(1),
            Exit::Conflict(CONFLICT_DEFAULT),
            Exit::LockLost,
            Exit::TimedOut,
            Exit::Unavailable,
            Exit::NoPermission,
            Exit::Usage,
            Exit::Software,
            Exit::NotExecutable,
            Exit::NotFound,
            Exit::Held,
            Exit::NotDeleted,
        ];
        let kind = std::mem::discriminant::<Exit>;
        for exit in every.iter().filter(|exit| of_run(exit)) {
            let listed = RUN.iter().flat_map(|row| row.exits);
            assert!(listed.clone().any(|e| kind(e) == kind(exit)), "{exit:?}");
        }
        assert!(STATUS.iter().any(|row| row.exits == [Exit::Held]));
        assert!(BREAK.iter().any(|row| row.exits == [Exit::NotDeleted]));
        assert_eq!(Exit::Signal(9).code(), 128 + 9);
    }

    #[test]
    fn help_tables_are_laid_out_from_the_rows() {
        let text = help(BREAK);
        assert!(
            text.starts_with("Exit status:\n  0   the node was deleted\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\n  1   nothing deleted: the path is free, the node (or --record) does not exist,\n      or the answer"
            ),
            "{text}"
        );
        for rows in [RUN, HOLD, RELEASE, STATUS, LIST, BREAK] {
            let text = help(rows);
            assert!(text.lines().all(|line| line.len() <= 80), "{text}");
            for row in rows {
                assert!(
                    text.contains(&format!("\n  {} ", row.code())),
                    "{}",
                    row.code()
                );
            }
        }
    }

    /// README's exit status table is [`RUN`], row by row (README quotes
    /// the options in backticks).
    #[test]
    fn readme_table_is_the_run_table() {
        let readme = include_str!("../../README.md");
        let section = (readme.split("\n## Exit status\n").nth(1)).expect("README's exit status");
        let rows: Vec<(String, String)> = (section.lines())
            .skip_while(|line| !line.starts_with("| code |"))
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<String> = (line.trim_matches('|').split(" | "))
                    .map(|cell| cell.trim().replace('`', ""))
                    .collect();
                (cells[0].clone(), cells[1..].join(" | "))
            })
            .collect();
        let table: Vec<(String, String)> = (RUN.iter())
            .map(|row| (row.code(), row.meaning.to_owned()))
            .collect();
        assert_eq!(rows, table);
    }

    #[test]
    fn every_way_to_75_is_named_wherever_75_is() {
        let row = |text: &'static str| {
            (text.lines())
                .find(|line| line.starts_with("| 75 |"))
                .expect("a row for 75")
        };
        let readme = row(include_str!("../../README.md"));
        let design = row(include_str!("../../docs/design.md"));
        // The help's entry: its row and the lines that continue it.
        let help: String = (help(RUN).lines())
            .skip_while(|line| !line.starts_with("  75 "))
            .take_while(|line| line.starts_with("  75 ") || line.starts_with("   "))
            .collect();
        let options: Vec<&str> = readme
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|word| word.starts_with("--"))
            .collect();
        assert!(options.len() >= 5, "{readme}");
        for option in options {
            assert!(help.contains(option), "{option} not under 75 in --help");
            assert!(
                design.contains(option),
                "{option} not under 75 in design.md"
            );
        }
    }
}
