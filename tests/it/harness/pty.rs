//! A pseudo-terminal, to run zklock as the controlling terminal's foreground job, the
//! way a user at a shell prompt does.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::cmd::KillOnDrop;

/// The master side, plus the slave until a child has been given it.
pub struct Pty {
    master: File,
    slave: Option<OwnedFd>,
    /// Everything read from the master so far.
    output: Vec<u8>,
}

impl Pty {
    pub fn open() -> Pty {
        // SAFETY: posix_openpt, grantpt and unlockpt take no pointers; ptsname_r writes
        // at most `name.len()` bytes into our buffer; open gets a NUL-terminated path.
        // Each returned descriptor is checked and then owned by exactly one File/OwnedFd.
        unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(master >= 0, "posix_openpt: {}", io::Error::last_os_error());
            let master = File::from_raw_fd(master);
            let fd = master.as_raw_fd();
            assert_eq!(
                libc::grantpt(fd),
                0,
                "grantpt: {}",
                io::Error::last_os_error()
            );
            assert_eq!(
                libc::unlockpt(fd),
                0,
                "unlockpt: {}",
                io::Error::last_os_error()
            );
            let mut name = [0 as libc::c_char; 128];
            let rc = libc::ptsname_r(fd, name.as_mut_ptr(), name.len());
            assert_eq!(rc, 0, "ptsname_r: {}", io::Error::from_raw_os_error(rc));
            let slave = libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            assert!(slave >= 0, "open pty slave: {}", io::Error::last_os_error());
            Pty {
                master,
                slave: Some(OwnedFd::from_raw_fd(slave)),
                output: Vec::new(),
            }
        }
    }

    /// Spawns `cmd` as the leader of a new session whose controlling terminal is the
    /// slave, with the slave as stdin, stdout and stderr. The slave is then closed here,
    /// so the master reads EOF once every process using the terminal is gone (which is
    /// why `cmd`, holding copies of the slave, is consumed).
    pub fn spawn(&mut self, mut cmd: Command) -> KillOnDrop {
        let slave = self
            .slave
            .take()
            .expect("the pty slave was already given away");
        let dup = || Stdio::from(slave.try_clone().expect("dup pty slave"));
        cmd.stdin(dup()).stdout(dup()).stderr(dup());
        // SAFETY: setsid and ioctl are async-signal-safe and take no pointers from the
        // parent's heap; fd 0 is the slave by then (stdio is set up before pre_exec).
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        drop(cmd);
        drop(slave);
        KillOnDrop(child)
    }

    /// Sets the terminal's size (a new pty has none, and programs then assume
    /// 80 columns or fewer).
    pub fn set_size(&mut self, rows: u16, cols: u16) {
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize, which lives on our stack.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        assert_eq!(rc, 0, "TIOCSWINSZ: {}", io::Error::last_os_error());
    }

    /// Types `bytes` at the terminal (0x03 is Ctrl-C under the default settings).
    pub fn write(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).expect("write to pty master");
    }

    /// Everything the terminal showed so far, lossily decoded.
    pub fn output(&self) -> String {
        String::from_utf8_lossy(&self.output).into_owned()
    }

    /// Reads until the output contains `needle`; panics with the output after `timeout`.
    pub fn read_until(&mut self, needle: &str, timeout: Duration) -> String {
        self.read_until_from(0, needle, timeout)
    }

    /// How many bytes were read so far: a mark for [`Pty::read_until_from`].
    pub fn mark(&self) -> usize {
        self.output.len()
    }

    /// Reads until the output after byte `mark` contains `needle`; panics with the
    /// output after `timeout`.
    pub fn read_until_from(&mut self, mark: usize, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let found = |pty: &Pty| String::from_utf8_lossy(&pty.output[mark..]).contains(needle);
        while !found(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero() && self.read_some(left),
                "no {needle:?} on the terminal within {timeout:?}; it shows:\n{}",
                self.output()
            );
        }
        self.output()
    }

    /// Reads until every process has closed the terminal; panics after `timeout`.
    pub fn read_to_end(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "terminal still open after {timeout:?}; it shows:\n{}",
                self.output()
            );
            if !self.read_some(left) {
                return self.output();
            }
        }
    }

    /// Waits up to `timeout` for output and appends it; false at the end of output
    /// (Linux reports EIO on the master once the last slave descriptor is closed).
    fn read_some(&mut self, timeout: Duration) -> bool {
        let mut poll = libc::pollfd {
            fd: self.master.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: poll reads and writes exactly one pollfd, which lives on our stack.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            return true;
        }
        assert!(ready >= 0, "poll: {}", io::Error::last_os_error());
        if ready == 0 {
            return true;
        }
        let mut buf = [0u8; 4096];
        match self.master.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                self.output.extend_from_slice(&buf[..n]);
                true
            }
            Err(e) if e.raw_os_error() == Some(libc::EIO) => false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(e) => panic!("read pty master: {e}"),
        }
    }
}
