//! Subcommand options built only when their subcommand is used.
//!
//! clap builds the whole command-line model before it parses: every
//! subcommand's options, four of them with the connection and security
//! options. On `zklock run`, the path every lock hand-off and cron run
//! takes, that cost more start-up time than everything else zklock does
//! before connecting (bench/RESULTS.md). `Deferred<T>` hands clap `T`'s
//! options as a deferred builder (`clap::Command::defer`), which clap runs
//! only for the subcommand it descends into, or when something (help,
//! completions, man pages) needs the whole model.

use clap::builder::StyledStr;
use clap::{ArgMatches, Args, Command, FromArgMatches};

/// `T`, whose options clap adds to its subcommand only when needed.
#[derive(Debug)]
pub struct Deferred<T>(pub T);

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Deferred)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }

    fn augment_args(command: Command) -> Command {
        command.defer(build::<T>)
    }

    fn augment_args_for_update(command: Command) -> Command {
        command.defer(build_for_update::<T>)
    }
}

/// `T`'s options on `command`, as the deferred builder adds them.
pub(super) fn build<T: Args>(command: Command) -> Command {
    keeping_texts(command, T::augment_args)
}

fn build_for_update<T: Args>(command: Command) -> Command {
    keeping_texts(command, T::augment_args_for_update)
}

/// Runs `augment` on `command` as clap's derive would have before the
/// subcommand's own attributes: those (the texts from the subcommand's doc
/// comment and `after_help`) were set on `command` since, and must win over
/// the ones `T` sets from its own doc comments (a flattened struct's doc
/// comment is an `about`).
fn keeping_texts(command: Command, augment: fn(Command) -> Command) -> Command {
    type Getter = fn(&Command) -> Option<&StyledStr>;
    type Setter = fn(Command, StyledStr) -> Command;
    const TEXTS: [(Getter, Setter); 6] = [
        (Command::get_about, |c, s| c.about(s)),
        (Command::get_long_about, |c, s| c.long_about(s)),
        (Command::get_before_help, |c, s| c.before_help(s)),
        (Command::get_before_long_help, |c, s| c.before_long_help(s)),
        (Command::get_after_help, |c, s| c.after_help(s)),
        (Command::get_after_long_help, |c, s| c.after_long_help(s)),
    ];
    let given: Vec<Option<StyledStr>> = TEXTS
        .iter()
        .map(|(get, _)| get(&command).cloned())
        .collect();
    let mut command = augment(command);
    for ((_, set), text) in TEXTS.iter().zip(given) {
        if let Some(text) = text {
            command = set(command, text);
        }
    }
    command
}
