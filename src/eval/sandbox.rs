//! Runs untrusted Python (a model's completion with its problem's tests) in a separate process
//! per program: its own temporary directory, a wall-clock timeout, resource limits (address
//! space, CPU time, no core files, processes, file size, open files), and, where the machine
//! permits, a network namespace (no network), a PID namespace (everything the program started
//! dies with it) and an unprivileged user (so that the process limit holds even when mars runs
//! as root). In the child, `runner.py` installs an audit hook that refuses writes outside the
//! directory, new programs (`exec`, `subprocess`, `os.system`), sockets and `ctypes`. After each
//! run the process group is killed and any process still working in the directory is found and
//! killed: nothing is left running.
//!
//! No `unsafe`: the limits are set by the child itself (Python's `resource`), the namespaces
//! and the user by util-linux's `unshare` and `setpriv`, and signals go through `kill(1)`.
//!
//! Unix only: on other systems (Windows) [`Sandbox::new`] refuses, since what makes a run safe
//! to end — a process group that every fork of the program joins, signals to end it all — has
//! no counterpart there without `unsafe` calls into the system (job objects). The rest of mars
//! runs there; only executing completions does not.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The child's half: limits itself, audits, runs `program.py`.
const RUNNER: &str = include_str!("runner.py");
/// Most bytes of stdout / stderr kept per run (the rest is read and dropped).
const KEEP: usize = 16 << 10;
/// The unprivileged user and group a root-run sandbox switches to (`nobody`).
const NOBODY: u32 = 65_534;

/// What one program may use.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Limits {
    /// Wall-clock time, seconds.
    pub timeout_s: f64,
    /// Address space, bytes.
    pub memory_bytes: u64,
    /// Processes of the sandbox's user (`RLIMIT_NPROC`).
    pub processes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout_s: 10.0,
            memory_bytes: 2 << 30,
            processes: 64,
        }
    }
}

/// How a program's run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// It ran to the end: every test assertion held.
    Passed,
    /// It raised, exited non-zero or was killed by a signal (`reason`: the last line of its
    /// error output, or the signal).
    Failed { reason: String },
    /// Still running at the timeout: killed.
    TimedOut,
}

/// One run: the verdict, its time, the ends of its output, and how many processes outlived it
/// before the clean-up (0 when the namespaces held).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    #[serde(flatten)]
    pub verdict: Verdict,
    pub seconds: f64,
    pub stdout: String,
    pub stderr: String,
    pub survivors: usize,
}

/// What isolation this machine allows, found once.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Isolation {
    /// Network and PID namespaces (`unshare`).
    pub namespaces: bool,
    /// Running as `nobody` (only when mars runs as root and `setpriv` exists).
    pub unprivileged_user: bool,
    /// The address space bounded (`RLIMIT_AS`): not on macOS, whose kernel refuses the limit
    /// (Python's `setrlimit` raises there: cpython#78783) and would not enforce it, so there a
    /// program's memory is bounded by the machine and the timeout alone.
    pub memory_limited: bool,
}

impl Isolation {
    /// A line for reports.
    pub fn describe(&self) -> String {
        let ns = if self.namespaces {
            "network and PID namespaces (no network; the program's processes die with it)"
        } else {
            "NOT isolated from the network (this machine refused a network namespace)"
        };
        let user = if self.unprivileged_user {
            ", as user nobody"
        } else {
            ""
        };
        let memory = if self.memory_limited {
            ""
        } else {
            " (memory NOT limited: this system refuses RLIMIT_AS)"
        };
        format!("{ns}{user}; rlimits{memory}, audit hook, timeout")
    }
}

/// Runs programs one at a time under [`Limits`].
#[derive(Debug, Clone)]
pub struct Sandbox {
    python: PathBuf,
    limits: Limits,
    isolation: Isolation,
    root: bool,
}

/// The system calls the sandbox needs beyond std's portable ones: Unix's, and on other systems
/// what keeps the module compiling (never reached there: [`Sandbox::new`] refuses first).
#[cfg(unix)]
mod sys {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::path::Path;
    use std::process::{Command, ExitStatus};

    pub(super) fn is_root() -> bool {
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }

    /// The child leads a process group of its own, which its forks join.
    pub(super) fn own_group(command: &mut Command) -> &mut Command {
        command.process_group(0)
    }

    pub(super) fn signal(status: ExitStatus) -> Option<i32> {
        status.signal()
    }

    pub(super) fn give_to(dir: &Path, user: u32) -> std::io::Result<()> {
        std::os::unix::fs::chown(dir, Some(user), Some(user))
    }
}

#[cfg(not(unix))]
mod sys {
    use std::path::Path;
    use std::process::{Command, ExitStatus};

    pub(super) fn is_root() -> bool {
        false
    }

    pub(super) fn own_group(command: &mut Command) -> &mut Command {
        command
    }

    pub(super) fn signal(_: ExitStatus) -> Option<i32> {
        None
    }

    pub(super) fn give_to(_: &Path, _: u32) -> std::io::Result<()> {
        Ok(())
    }
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Sandbox {
    /// A sandbox with `limits`, probing what isolation this machine allows.
    ///
    /// # Errors
    /// Not a Unix system, no `python3` on the PATH, or limits that are not positive and finite.
    pub fn new(limits: Limits) -> Result<Self> {
        if !cfg!(unix) {
            bail!(
                "executing completions needs a Unix system: the sandbox ends every process a \
                 program starts through its process group and signals, which {} lacks",
                std::env::consts::OS
            );
        }
        if !(limits.timeout_s.is_finite() && limits.timeout_s > 0.0) {
            bail!("timeout {} s: must be a positive number", limits.timeout_s);
        }
        if limits.memory_bytes < (64 << 20) || limits.processes == 0 {
            bail!(
                "memory {} bytes / processes {}: at least 64 MiB and 1 process",
                limits.memory_bytes,
                limits.processes
            );
        }
        if !runs("python3", &["-c", "import resource"]) {
            bail!("python3 (with the resource module) is needed to execute completions");
        }
        let root = sys::is_root();
        let mut probe = vec!["--net", "--pid", "--fork", "--kill-child"];
        if !root {
            probe.push("--map-root-user");
        }
        probe.extend(["--", "true"]);
        let namespaces = runs("unshare", &probe);
        let unprivileged_user = root
            && runs(
                "setpriv",
                &[
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                    "true",
                ],
            );
        Ok(Self {
            python: PathBuf::from("python3"),
            limits,
            isolation: Isolation {
                namespaces,
                unprivileged_user,
                memory_limited: !cfg!(target_os = "macos"),
            },
            root,
        })
    }

    /// What isolation runs use.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Runs `program` (Python source) to its verdict.
    ///
    /// # Errors
    /// The temporary directory or the process could not be made; never the program's own
    /// failure, which is a [`Verdict`].
    pub fn run(&self, program: &str) -> Result<Outcome> {
        let dir = TempDir::new()?;
        std::fs::write(dir.path().join("program.py"), program)?;
        std::fs::write(dir.path().join("runner.py"), RUNNER)?;
        if self.isolation.unprivileged_user {
            sys::give_to(dir.path(), NOBODY).context("handing the sandbox directory to nobody")?;
        }
        let mut argv: Vec<String> = Vec::new();
        if self.isolation.namespaces {
            argv.extend(["unshare", "--net", "--pid", "--fork", "--kill-child"].map(String::from));
            if !self.root {
                argv.push("--map-root-user".into());
            }
            argv.push("--".into());
        }
        if self.isolation.unprivileged_user {
            argv.extend(
                [
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                ]
                .map(String::from),
            );
        }
        argv.push(self.python.display().to_string());
        argv.extend(["-I", "-B", "runner.py"].map(String::from));
        // 0: no address-space limit (runner.py sets none).
        let memory = if self.isolation.memory_limited {
            self.limits.memory_bytes
        } else {
            0
        };
        argv.push(memory.to_string());
        // CPU seconds: the wall-clock limit rounded up, so a busy loop dies either way.
        argv.push((self.limits.timeout_s.ceil() as u64 + 1).to_string());
        argv.push(self.limits.processes.to_string());

        let start = Instant::now();
        let mut command = Command::new(&argv[0]);
        let mut child = sys::own_group(&mut command)
            .args(&argv[1..])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", dir.path())
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", argv[0]))?;
        let pgid = child.id();
        let out = drain(child.stdout.take());
        let err = drain(child.stderr.take());
        let deadline = Duration::from_secs_f64(self.limits.timeout_s);
        let status = wait_until(&mut child, deadline)?;
        let seconds = start.elapsed().as_secs_f64();
        // Whatever is left of the group (the program's forks when there is no PID namespace).
        kill_group(pgid);
        let survivors = kill_survivors(dir.path());
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        let verdict = match status {
            None => Verdict::TimedOut,
            Some(s) if s.success() => Verdict::Passed,
            Some(s) => Verdict::Failed {
                reason: match sys::signal(s) {
                    Some(sig) => format!("killed by signal {sig}"),
                    None => last_line(&stderr).unwrap_or_else(|| format!("exit status {s}")),
                },
            },
        };
        Ok(Outcome {
            verdict,
            seconds,
            stdout,
            stderr,
            survivors,
        })
    }
}

/// The last non-empty line of `text`, at most 200 characters.
fn last_line(text: &str) -> Option<String> {
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(line.trim().chars().take(200).collect())
}

/// Reads a pipe to its end on a thread, keeping the first [`KEEP`] bytes.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let Some(mut pipe) = pipe else {
            return String::new();
        };
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            let room = KEEP.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}

/// Waits for `child` until `limit`; `None` when it was still running then (it is killed).
fn wait_until(child: &mut Child, limit: Duration) -> Result<Option<std::process::ExitStatus>> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if start.elapsed() >= limit {
            // SIGKILL: `unshare --kill-child` takes the program down with it, and with it the
            // PID namespace.
            child.kill().ok();
            kill_group(child.id());
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SIGKILL to process group `pgid` (through kill(1): no `unsafe` here).
fn kill_group(pgid: u32) {
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok();
}

/// Processes whose working directory is inside `dir` (a program's escaped forks): counted and
/// killed. The program's group was just sent SIGKILL, and a killed process keeps its working
/// directory until it has exited, which on a loaded machine can take a moment: processes get up
/// to a second to go before what is left counts as a survivor (CI once counted a busy loop's
/// own, already killed, process).
fn kill_survivors(dir: &Path) -> usize {
    let me = std::process::id();
    let in_dir = || -> Vec<u32> {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != me)
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
            })
            .collect()
    };
    let grace = Instant::now() + Duration::from_secs(1);
    while !in_dir().is_empty() && Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut found = 0;
    for _ in 0..3 {
        let pids = in_dir();
        if pids.is_empty() {
            break;
        }
        found = found.max(pids.len());
        for pid in pids {
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    found
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self> {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        for _ in 0..100 {
            let n = COUNT.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = base.join(format!("mars-sandbox-{}-{n}-{nanos}", std::process::id()));
            if std::fs::create_dir(&path).is_ok() {
                return Ok(Self(path));
            }
        }
        bail!("could not create a sandbox directory in {}", base.display())
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn sandbox(timeout_s: f64) -> Sandbox {
        Sandbox::new(Limits {
            timeout_s,
            ..Limits::default()
        })
        .unwrap()
    }

    #[test]
    fn a_correct_program_passes_and_a_wrong_one_fails_the_same_way_every_time() {
        let s = sandbox(10.0);
        let good = "def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\nprint('ok')\n";
        let bad = "def add(a, b):\n    return a - b\n\nassert add(2, 3) == 5\n";
        for _ in 0..3 {
            let g = s.run(good).unwrap();
            assert_eq!(g.verdict, Verdict::Passed, "{}", g.stderr);
            assert_eq!(g.stdout.trim(), "ok");
            let b = s.run(bad).unwrap();
            assert_eq!(
                b.verdict,
                Verdict::Failed {
                    reason: "AssertionError".into()
                },
                "{}",
                b.stderr
            );
        }
    }

    #[test]
    fn an_infinite_loop_is_killed_at_the_timeout() {
        let s = sandbox(1.5);
        let start = Instant::now();
        let o = s.run("while True:\n    pass\n").unwrap();
        assert!(
            matches!(o.verdict, Verdict::TimedOut | Verdict::Failed { .. }),
            "{o:?}"
        );
        assert_ne!(o.verdict, Verdict::Passed);
        assert!(
            start.elapsed() < Duration::from_secs(6),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(o.survivors, 0);
    }

    /// A fork bomb (and forks that sleep past the run) are stopped, and no process of theirs
    /// outlives the run: none is found working in any sandbox directory afterwards.
    #[test]
    fn a_fork_bomb_is_killed_and_nothing_survives() {
        let s = sandbox(2.0);
        let start = Instant::now();
        let bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n";
        let o = s.run(bomb).unwrap();
        assert_ne!(o.verdict, Verdict::Passed);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        // A fork that would sleep past the run; the program prints its directory first.
        let sleeper = "import os, time\nprint(os.getcwd(), flush=True)\nif os.fork() == 0:\n    time.sleep(60)\n";
        let o = s.run(sleeper).unwrap();
        assert_eq!(o.verdict, Verdict::Passed, "{}", o.stderr);
        if s.isolation().namespaces {
            assert_eq!(
                o.survivors, 0,
                "the PID namespace should have ended the fork"
            );
        }
        let dir = PathBuf::from(o.stdout.trim());
        assert!(dir.starts_with(std::env::temp_dir()), "{dir:?}");
        std::thread::sleep(Duration::from_millis(100));
        let left: Vec<_> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&dir))
            })
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "processes left in {left:?}");
    }

    #[test]
    fn exhausting_memory_writing_outside_and_the_network_fail_that_program_only() {
        let s = sandbox(10.0);
        let o = s.run("x = bytearray(8 << 30)\n").unwrap();
        assert_eq!(
            o.verdict,
            Verdict::Failed {
                reason: "MemoryError".into()
            },
            "{}",
            o.stderr
        );
        let outside = std::env::temp_dir().join(format!("mars-outside-{}", std::process::id()));
        let o = s
            .run(&format!(
                "open({:?}, 'w').write('x')\n",
                outside.display().to_string()
            ))
            .unwrap();
        assert!(
            matches!(&o.verdict, Verdict::Failed { reason } if reason.contains("PermissionError")),
            "{o:?}"
        );
        assert!(!outside.exists());
        // Inside its own directory a program may write.
        let o = s
            .run("open('scratch.txt', 'w').write('x')\nassert open('scratch.txt').read() == 'x'\n")
            .unwrap();
        assert_eq!(o.verdict, Verdict::Passed, "{}", o.stderr);
        let o = s
            .run("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n")
            .unwrap();
        assert!(matches!(o.verdict, Verdict::Failed { .. }), "{o:?}");
        let o = s
            .run("import subprocess\nsubprocess.run(['true'])\n")
            .unwrap();
        assert!(
            matches!(&o.verdict, Verdict::Failed { reason } if reason.contains("PermissionError")),
            "{o:?}"
        );
        // And the sandbox still works after all of that.
        assert_eq!(
            s.run("assert 1 + 1 == 2\n").unwrap().verdict,
            Verdict::Passed
        );
    }

    /// The address space is bounded at the limit where the sandbox says so, and left alone
    /// where it does not (macOS, whose kernel refuses the limit: every program would fail
    /// there, setting it).
    #[test]
    fn the_address_space_is_limited_only_where_the_sandbox_says_so() {
        let mut s = sandbox(10.0);
        assert_eq!(s.isolation().memory_limited, !cfg!(target_os = "macos"));
        let probe = "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0])\n";
        s.isolation.memory_limited = true;
        let o = s.run(probe).unwrap();
        assert_eq!(o.verdict, Verdict::Passed, "{}", o.stderr);
        assert_eq!(o.stdout.trim(), Limits::default().memory_bytes.to_string());
        s.isolation.memory_limited = false;
        assert!(s.isolation().describe().contains("memory NOT limited"));
        let o = s.run(probe).unwrap();
        assert_eq!(o.verdict, Verdict::Passed, "{}", o.stderr);
        // RLIM_INFINITY, or whatever bound the machine itself set: never the sandbox's.
        assert_ne!(o.stdout.trim(), Limits::default().memory_bytes.to_string());
    }

    #[test]
    fn bad_limits_are_refused() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                Sandbox::new(Limits {
                    timeout_s: bad,
                    ..Limits::default()
                })
                .is_err()
            );
        }
        assert!(
            Sandbox::new(Limits {
                processes: 0,
                ..Limits::default()
            })
            .is_err()
        );
    }
}
