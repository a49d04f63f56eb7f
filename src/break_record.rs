//! `zklock break --record PATH`: delete the run record `--once-per` keeps
//! beside the lock (README "Cron"), the version that was shown.

use std::io::IsTerminal;

use anyhow::Result;

use crate::break_lock::{Target, confirmed};
use crate::cli::BreakArgs;
use crate::exit::{Exit, Failure};
use crate::lock::record::record_path;
use crate::lock::record_store;
use crate::present::run_text;
use crate::report::{print_stdout, say};
use crate::session::{self, Session};

pub fn break_record(args: &BreakArgs) -> Result<Exit> {
    let options = args.connection.settings()?;
    let lock = args.path.as_str();
    let path = record_path(lock);
    let found = session::block_on(async {
        let session = Session::connect(&options).await?;
        let found = record_store::read(session.client(), lock).await;
        session.close(&[]).await;
        found
    })?;
    let Some((record, stat)) = found else {
        say(format_args!("{lock} has no run record; nothing deleted"));
        return Ok(Exit::NotDeleted);
    };
    let mut text = format!("{lock}: run record {path}\n");
    for (what, run) in [
        ("last run", &record.last_run),
        ("last success", &record.last_success),
    ] {
        if let Some(run) = run {
            text.push_str(&format!("  {what}: {}\n", run_text(run)));
        }
    }
    let target = Target {
        path: path.clone(),
        czxid: stat.czxid,
        text,
        done: format!("deleted {path}"),
    };
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "not deleting {path} without confirmation: stdin is not a terminal; add --yes"
            )));
        }
        if !confirmed(&target)? {
            say(format_args!("nothing deleted"));
            return Ok(Exit::NotDeleted);
        }
    }
    let deleted = session::block_on(async {
        let session = Session::connect(&options).await?;
        let deleted = record_store::delete(session.client(), lock, stat.version).await;
        session.close(&[]).await;
        deleted
    })?;
    if deleted {
        print_stdout(&target.done);
        Ok(Exit::Command(0))
    } else {
        say(format_args!(
            "{path} changed or was deleted after it was shown; nothing deleted"
        ));
        Ok(Exit::Conflict(75))
    }
}
