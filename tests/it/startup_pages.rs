//! A run still going after a second gives back the pages of its executable
//! that only its start used (src/startup_pages.rs), and goes on working.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::harness::{
    Gated, Inspector, KillOnDrop, assert_no_nodes, shared_server, unique_path, wait_for_exit,
    wait_until, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);
const PAGE: u64 = 4096;

#[test]
fn a_waiter_gives_back_the_relocation_table_and_still_takes_the_lock() {
    let zk = Inspector::connect(&shared_server().connect_string());
    let path = unique_path("startup-pages");
    let connect = shared_server().connect_string();
    let holder = Gated::start(zklock_run(&connect, &path));
    let mut cmd = zklock_run(&connect, &path);
    cmd.args(["--", "true"]).stdout(Stdio::null());
    let mut waiter = KillOnDrop(cmd.spawn().expect("spawn waiter"));
    wait_until(LONG, "the waiter queued", || zk.children(&path).len() == 2);

    let binary = Path::new(env!("CARGO_BIN_EXE_zklock"));
    let table = relocation_table(binary);
    let pages = (table.end - table.start) / PAGE;
    assert!(pages >= 4, "a relocation table of {pages} whole pages");
    let pid = waiter.id();
    // The loader read the whole table before main; a second later, at most a
    // few of its pages are mapped again (the kernel maps neighbours of a
    // faulting page of .rodata too).
    wait_until(LONG, "the relocation table given back", || {
        resident_pages(pid, binary, &table) <= pages / 4
    });

    assert!(holder.finish().success());
    let status = wait_for_exit(&mut waiter, LONG).expect("the waiter still running");
    assert!(status.success(), "waiter: {status}");
    assert_no_nodes(&zk, &path);
}

/// The whole pages of the executable's relocation table (DT_RELA, DT_RELASZ
/// of its dynamic section), as link-time addresses.
fn relocation_table(binary: &Path) -> Range<u64> {
    let elf = std::fs::read(binary).expect("read the binary");
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    assert_eq!(u16_at(16), 3, "a position-independent executable");
    let (phoff, phentsize, phnum) = (u64_at(32) as usize, u16_at(54), u16_at(56));
    let dynamic = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&header| u32_at(header) == 2) // PT_DYNAMIC
        .expect("a dynamic section");
    let (offset, size) = (u64_at(dynamic + 8) as usize, u64_at(dynamic + 32) as usize);
    let (mut address, mut length) = (None, None);
    for entry in (offset..offset + size).step_by(16) {
        match u64_at(entry) {
            7 => address = Some(u64_at(entry + 8)),
            8 => length = Some(u64_at(entry + 8)),
            _ => {}
        }
    }
    let (address, length) = (address.expect("DT_RELA"), length.expect("DT_RELASZ"));
    address.div_ceil(PAGE) * PAGE..(address + length) / PAGE * PAGE
}

/// How many pages of `range` (link-time addresses of `binary`) are mapped in
/// process `pid`, from /proc/PID/pagemap's present bit.
fn resident_pages(pid: u32, binary: &Path, range: &Range<u64>) -> u64 {
    let binary = binary.canonicalize().expect("the binary's path");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("read maps");
    let base = maps
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let mapped = fields.get(5).map(Path::new)?;
            (fields[2] == "00000000" && mapped == binary).then(|| {
                let start = fields[0].split('-').next().unwrap();
                u64::from_str_radix(start, 16).unwrap()
            })
        })
        .expect("the executable's first mapping");
    let mut pagemap = File::open(format!("/proc/{pid}/pagemap")).expect("open pagemap");
    let mut resident = 0;
    for page in (base + range.start) / PAGE..(base + range.end) / PAGE {
        let mut entry = [0; 8];
        pagemap.seek(SeekFrom::Start(page * 8)).unwrap();
        pagemap.read_exact(&mut entry).unwrap();
        resident += u64::from_le_bytes(entry) >> 63;
    }
    resident
}
