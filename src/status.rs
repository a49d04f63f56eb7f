//! `zklock status PATH...`: who holds each lock and who waits.

use std::time::SystemTime;

use anyhow::Result;
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::exit::Exit;
use crate::lock::{inspect, record};
use crate::present::{self, LockJson};
use crate::report::print_stdout;
use crate::session::{self, Session};

#[derive(Serialize)]
struct StatusJson {
    locks: Vec<LockJson>,
}

pub fn status(args: StatusArgs) -> Result<Exit> {
    session::block_on(async {
        let session = Session::connect(&args.connection.settings()?).await?;
        let mut locks = Vec::new();
        let mut any_taken = false;
        for path in &args.paths {
            let view = inspect::read_lock(session.client(), path.as_str()).await;
            let record = record::read(session.client(), path.as_str()).await;
            let (view, record) = match (view, record) {
                (Ok(view), Ok(record)) => (view, record),
                (Err(err), _) | (_, Err(err)) => {
                    session.close(&[]).await;
                    return Err(err);
                }
            };
            any_taken |= !view.is_free();
            let mut json = present::lock_json(path.as_str(), &view, SystemTime::now());
            if let Some((record, _)) = record {
                json.last_run = record.last_run;
                json.last_success = record.last_success;
            }
            locks.push(json);
        }
        session.close(&[]).await;
        if args.json {
            print_stdout(&serde_json::to_string_pretty(&StatusJson { locks })?);
        } else {
            let text: Vec<String> = locks.iter().map(present::lock_text).collect();
            print_stdout(text.concat().trim_end());
        }
        Ok(if any_taken {
            Exit::Held
        } else {
            Exit::Command(0)
        })
    })
}
