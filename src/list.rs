//! `zklock list [PREFIX]`: every lock under PREFIX, one line each.

use std::time::SystemTime;

use anyhow::Result;

use crate::cli::ListArgs;
use crate::exit::Exit;
use crate::lock::inspect;
use crate::present::json::{self, ListEntry, ListJson};
use crate::present::{self, LockStatus};
use crate::report::print_stdout;
use crate::session::{self, Session};

pub fn list(args: ListArgs) -> Result<Exit> {
    session::block_on(async {
        let session = Session::connect(&args.connection.settings()?).await?;
        let prefix = args.prefix.as_str();
        let reading = async |session: &Session| inspect::read_tree(session.client(), prefix).await;
        let (tree, _) = session.scope(reading).await;
        let now = SystemTime::now();
        let locks: Vec<ListEntry> = tree?
            .into_iter()
            .map(|(path, view)| json::list_entry(&LockStatus::new(&path, view, now)))
            .collect();
        if args.json {
            print_stdout(&serde_json::to_string_pretty(&ListJson { locks })?);
        } else {
            let lines: Vec<String> = locks.iter().map(present::list_line).collect();
            print_stdout(&lines.join("\n"));
        }
        Ok(Exit::Command(0))
    })
}
