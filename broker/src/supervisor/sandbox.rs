//! The filesystem and network sandbox of one plugin process (Linux Landlock; see
//! SECURITY.md).
//!
//! A sandboxed plugin may read (and execute) the system directories, its runtime (the
//! interpreter's prefix, a venv and the packages it imports, `node_modules` up the tree
//! and the packages they link to), its own folder, the folder of an absolute `entry` and
//! the manifest's `sandbox.read`; it may write its own data and temp directories and
//! the manifest's `sandbox.write`. No rule reaches the broker's data dir (`hearth.db`,
//! `admin.token`, `hearth.toml`, `adapters/`, `knowledge/`, other plugins' data) or a
//! plugin root (other plugins' folders): a broad rule whose subtree holds one of those
//! is split into rules for each of its other entries. With `sandbox.net_connect` the
//! plugin may only open TCP connections to those ports (Landlock matches ports, not
//! hosts). From ABI 6 on it may not signal or reach the abstract Unix sockets of
//! processes outside its sandbox.
//!
//! The ruleset is built in the broker before the fork; the child only calls
//! `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self` (both async-signal-safe)
//! before `exec`.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};

use crate::manifest::{PluginSpec, Runtime};

/// Newest Landlock ABI the broker's rules were written and tested for; a newer kernel
/// is used at this level (its extra restrictions are not asked for).
pub const TESTED_ABI: i32 = 6;

/// Read-only system roots every sandboxed plugin may read and execute from (those
/// that exist).
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/nix/store",
    "/run/systemd/resolve",
    "/run/resolvconf",
];

/// Files under the system roots no plugin may read even as root: password hashes,
/// host keys, sudo rules, TLS private keys.
const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
];

/// Devices a plugin may read and write. Not terminals (`/dev/tty`, `/dev/pts`: the
/// operator's shells) nor `/dev/shm` (shared by every process of the machine); a
/// plugin that needs them lists them in `sandbox.write`.
const DEVICES_RW: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];
/// Devices a plugin may read (`/dev/fd` is a link into `/proc`, granted with it).
const DEVICES_R: &[&str] = &["/dev/random", "/dev/urandom"];

/// The kernel's Landlock ABI version, or `None` when plugins cannot be sandboxed: the
/// kernel has no Landlock (not built in, or not in the `lsm=` boot list), or a
/// process cannot restrict itself (e.g. a container's seccomp filter refuses
/// `landlock_restrict_self`). Asked once per process: the version, then a forked
/// child that applies a ruleset and reports.
pub fn landlock_abi() -> Option<i32> {
    static ABI_VERSION: OnceLock<Option<i32>> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        // SAFETY: LANDLOCK_CREATE_RULESET_VERSION (1) with a null attr only queries.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32,
            )
        };
        let abi = (v > 0).then_some(v as i32)?;
        restrict_works(ABI::from(abi.min(TESTED_ABI))).then_some(abi)
    })
}

/// Whether a child process can apply a Landlock ruleset.
fn restrict_works(abi: ABI) -> bool {
    let created = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create());
    let Ok(created) = created else { return false };
    let fd: Option<OwnedFd> = created.into();
    let Some(fd) = fd else { return false };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // SAFETY: the child only makes async-signal-safe calls (prctl, syscall, _exit);
    // the parent waits for that one pid.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let code = if restrict_self(Some(raw)).is_ok() {
                0
            } else {
                1
            };
            libc::_exit(code);
        }
        if pid < 0 {
            return false;
        }
        let mut status = 0;
        if libc::waitpid(pid, &mut status, 0) != pid {
            return false;
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

/// How a plugin process is confined; shown by `hearth plugins list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxState {
    /// Not started yet.
    Pending,
    /// Landlock rules applied at this ABI; `ports` are the only TCP ports it may
    /// connect to (`None`: any).
    Landlock {
        /// ABI level the rules were applied at.
        abi: i32,
        /// Allowed TCP connect ports, if restricted.
        ports: Option<Vec<u16>>,
    },
    /// The manifest says `"sandbox": false`.
    OptedOut,
    /// The kernel has no Landlock: the plugin runs unconfined.
    Unavailable,
    /// A process started by hand that attached with a one-time token: the broker did
    /// not start it, so it runs as its starter confined it.
    Attached,
}

impl std::fmt::Display for SandboxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SandboxState::Pending => f.write_str("-"),
            SandboxState::Landlock { abi, ports: None } => write!(f, "landlock v{abi}"),
            SandboxState::Landlock {
                abi,
                ports: Some(p),
            } => {
                let ports: Vec<_> = p.iter().map(|p| p.to_string()).collect();
                write!(f, "landlock v{abi}, tcp {}", ports.join(","))
            }
            SandboxState::OptedOut => f.write_str("off (plugin.json)"),
            SandboxState::Unavailable => f.write_str("off (no Landlock in this kernel)"),
            SandboxState::Attached => f.write_str("off (attached)"),
        }
    }
}

/// What the broker knows beyond the manifest: where its own state lives.
#[derive(Debug, Clone, Default)]
pub struct Protected {
    /// Paths no broad rule may reach: the data dir, every plugin root and every
    /// loaded plugin's folder.
    pub paths: Vec<PathBuf>,
}

/// A sandbox ready to apply in the child: the ruleset fd and what it means.
#[derive(Debug)]
pub struct Prepared {
    /// The Landlock ruleset (close-on-exec; the child applies it before `exec`).
    pub ruleset: OwnedFd,
    /// What `plugins list` shows.
    pub state: SandboxState,
    /// Paths of the manifest's `sandbox.read`/`write` that were not granted (inside
    /// the broker's data dir or a plugin root), to log.
    pub refused: Vec<PathBuf>,
}

/// The paths one plugin may read (and execute) and write.
#[derive(Debug, Default)]
struct Grants {
    read: BTreeSet<PathBuf>,
    write: BTreeSet<PathBuf>,
    refused: Vec<PathBuf>,
}

impl Grants {
    /// Grants `path` (made absolute and resolved) minus every protected subtree.
    fn add_except(&mut self, path: &Path, protected: &[PathBuf], write: bool, explicit: bool) {
        if let Ok(path) = std::fs::canonicalize(path) {
            self.add_canonical(path, protected, write, explicit);
        }
    }

    /// [`Grants::add_except`] of a path already resolved.
    fn add_canonical(&mut self, path: PathBuf, protected: &[PathBuf], write: bool, explicit: bool) {
        if protected.iter().any(|p| path.starts_with(p)) {
            if explicit {
                self.refused.push(path);
            }
            return;
        }
        if !protected.iter().any(|p| p.starts_with(&path)) {
            if write {
                self.write.insert(path);
            } else {
                self.read.insert(path);
            }
            return;
        }
        // A protected path lies below: grant each other entry instead.
        let Ok(entries) = std::fs::read_dir(&path) else {
            return;
        };
        for entry in entries.flatten() {
            // Only a link needs resolving: the rest of a resolved folder is resolved.
            if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                self.add_except(&entry.path(), protected, write, false);
            } else {
                self.add_canonical(entry.path(), protected, write, false);
            }
        }
    }

    /// Grants `path` as it is (the plugin's own folders).
    fn add_own(&mut self, path: &Path, write: bool) {
        if let Ok(path) = std::fs::canonicalize(path) {
            if write {
                self.write.insert(path);
            } else {
                self.read.insert(path);
            }
        }
    }
}

/// Builds the Landlock ruleset of `spec` started as `program` with `env`, or says why
/// it runs unconfined (`Err(state)`: opted out, or no Landlock). `data` and `tmp` are
/// its own writable directories: they must sit directly in `<data_dir>/plugin-data`
/// and `<data_dir>/tmp` with no link on the way (checked here). Errors building the
/// ruleset are returned as text (the plugin is then not started: it never runs less
/// confined than promised).
pub fn prepare(
    spec: &PluginSpec,
    program: &Path,
    env: &[(String, String)],
    data: &Path,
    tmp: &Path,
    protected: &Protected,
) -> Result<Result<Prepared, SandboxState>, String> {
    let sandbox = &spec.sandbox;
    if !sandbox.enabled {
        return Ok(Err(SandboxState::OptedOut));
    }
    let Some(kernel_abi) = landlock_abi() else {
        return Ok(Err(SandboxState::Unavailable));
    };
    let level = kernel_abi.min(TESTED_ABI);

    // What every sandboxed process may use: the system, and its interpreter.
    let (mut grants, protected_paths) = system_grants(protected);
    for path in interpreter_paths(spec, program) {
        grants.add_except(&path, &protected_paths, false, false);
    }
    // The interpreter probe runs under these grants alone: it may be the manifest's
    // program and must not run unconfined.
    let probe_grants = Grants {
        read: grants.read.clone(),
        write: grants.write.clone(),
        refused: Vec::new(),
    };
    let probe_ruleset = || build_ruleset(&probe_grants, level, None);
    for path in runtime_paths(spec, program, env, probe_ruleset)? {
        grants.add_except(&path, &protected_paths, false, false);
    }

    if spec.runtime == Runtime::Mcp {
        for (path, write) in launcher_paths(program, env) {
            grants.add_except(&path, &protected_paths, write, false);
        }
        // What its command line names is what it is for (a filesystem server's
        // folders): absolute paths that exist — folders read-write, files read-only —
        // never the protected ones.
        if let Some(crate::manifest::McpTransport::Stdio { args, .. }) =
            spec.mcp.as_ref().map(|m| &m.transport)
        {
            for arg in args
                .iter()
                .map(Path::new)
                .filter(|p| p.is_absolute() && p.exists())
            {
                grants.add_except(arg, &protected_paths, arg.is_dir(), true);
            }
        }
    }
    grants.add_own(&spec.dir, false);
    if !spec.entry.starts_with(&spec.dir) {
        if let Some(parent) = spec.entry.parent() {
            grants.add_except(parent, &protected_paths, false, false);
        }
    }
    // A listed path inside the plugin's own folder is its own (its folder sits in a
    // protected plugin root); any other goes around the protected ones.
    let own = std::fs::canonicalize(&spec.dir).unwrap_or_else(|_| spec.dir.clone());
    for (paths, write) in [(&sandbox.read, false), (&sandbox.write, true)] {
        for path in paths {
            match std::fs::canonicalize(path) {
                Ok(real) if real.starts_with(&own) => grants.add_own(&real, write),
                _ => grants.add_except(path, &protected_paths, write, true),
            }
        }
    }
    for dir in [data, tmp] {
        let Some(real) = plain_child(dir) else {
            return Err(format!(
                "{} is not a plain folder of the data dir (a link?); not granting it",
                dir.display()
            ));
        };
        grants.write.insert(real);
    }

    let ports = sandbox.net_connect.as_ref().map(|list| {
        let mut ports: Vec<u16> = list.iter().map(|(_, port)| *port).collect();
        // When the broker traces to a collector on this machine, the plugin may reach
        // it too (not a plugin that asked for no network at all).
        if !ports.is_empty() {
            ports.extend(crate::observe::trace::collector_port());
        }
        ports.sort_unstable();
        ports.dedup();
        ports
    });
    let ports = ports.filter(|_| level >= 4);
    let ruleset = build_ruleset(&grants, level, ports.as_deref())?;
    Ok(Ok(Prepared {
        ruleset,
        state: SandboxState::Landlock { abi: level, ports },
        refused: grants.refused,
    }))
}

/// What a build step (manifest `build`, see `super::build`) may use besides the system
/// roots; every path is granted only where it exists.
#[derive(Debug, Default)]
pub struct BuildGrants {
    /// Read and execute, around the protected paths (the toolchain, `replace` and path
    /// dependency targets, `sandbox.read`).
    pub read: Vec<PathBuf>,
    /// Read and write, around the protected paths (tool caches, `sandbox.write`).
    pub write: Vec<PathBuf>,
    /// Read and write as they are, although a protected path holds them: the plugin's
    /// own folder and the build's temp dir.
    pub own: Vec<PathBuf>,
}

/// What every sandboxed process (plugin or build) may use: the system directories
/// (minus the protected paths and system secrets) and the devices; with the protected
/// paths, canonical, which later grants must also leave out.
fn system_grants(protected: &Protected) -> (Grants, Vec<PathBuf>) {
    let mut protected_paths: Vec<PathBuf> = protected
        .paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    protected_paths.extend(SYSTEM_SECRETS.iter().map(PathBuf::from));
    let mut grants = Grants::default();
    for root in SYSTEM_READ {
        grants.add_except(Path::new(root), &protected_paths, false, false);
    }
    for dev in DEVICES_R {
        grants.add_own(Path::new(dev), false);
    }
    for dev in DEVICES_RW {
        grants.add_own(Path::new(dev), true);
    }
    (grants, protected_paths)
}

/// The Landlock ruleset of a build step: the system roots and devices a plugin gets,
/// plus `grants`; no network rule (a build may download modules and crates). Like
/// [`prepare`], `Err(state)` when it runs unconfined (`"sandbox": false`, or no
/// Landlock), and an error text when the ruleset cannot be built.
pub fn prepare_build(
    enabled: bool,
    grants: &BuildGrants,
    protected: &Protected,
) -> Result<Result<Prepared, SandboxState>, String> {
    if !enabled {
        return Ok(Err(SandboxState::OptedOut));
    }
    let Some(kernel_abi) = landlock_abi() else {
        return Ok(Err(SandboxState::Unavailable));
    };
    let level = kernel_abi.min(TESTED_ABI);
    let (mut out, protected_paths) = system_grants(protected);
    for path in &grants.read {
        out.add_except(path, &protected_paths, false, true);
    }
    for path in &grants.write {
        out.add_except(path, &protected_paths, true, true);
    }
    for path in &grants.own {
        out.add_own(path, true);
    }
    let ruleset = build_ruleset(&out, level, None)?;
    Ok(Ok(Prepared {
        ruleset,
        state: SandboxState::Landlock {
            abi: level,
            ports: None,
        },
        refused: out.refused,
    }))
}

/// The resolved path of `dir` when it is a real folder (not a link) that resolves to
/// a child of its parent's resolved path: nothing below the parent redirects it.
/// (Links above it — a data dir under a linked home — are the operator's and fine.)
fn plain_child(dir: &Path) -> Option<PathBuf> {
    let is_dir = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_dir());
    let real = std::fs::canonicalize(dir).ok()?;
    let parent = std::fs::canonicalize(dir.parent()?).ok()?;
    (is_dir && real == parent.join(dir.file_name()?)).then_some(real)
}

/// A Landlock ruleset granting `grants` (reads with execute; writes with every
/// right but making devices), TCP connect only to `ports` when given, and (ABI 6)
/// scoped signals and abstract Unix sockets.
fn build_ruleset(grants: &Grants, level: i32, ports: Option<&[u16]>) -> Result<OwnedFd, String> {
    let abi = ABI::from(level);
    let fail = |e: &dyn std::fmt::Display| format!("building the Landlock ruleset: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| fail(&e))?;
    if ports.is_some() {
        ruleset = ruleset
            .handle_access(AccessNet::ConnectTcp)
            .map_err(|e| fail(&e))?;
    }
    if level >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(|e| fail(&e))?;
    }
    let mut created = ruleset.create().map_err(|e| fail(&e))?;
    let read_access = AccessFs::from_read(abi);
    let write_access = AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    for (paths, access) in [(&grants.read, read_access), (&grants.write, write_access)] {
        for path in paths {
            // A path that vanished since it was listed is simply not granted.
            let Ok(fd) = PathFd::new(path) else { continue };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| fail(&format!("{}: {e}", path.display())))?;
        }
    }
    for port in ports.into_iter().flatten() {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(|e| fail(&e))?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| fail(&"the kernel refused to create a ruleset"))
}

/// Confines the calling (child) process: drops every capability when it runs as
/// root (so root plugins cannot ptrace, mknod or override file modes), sets
/// `PR_SET_NO_NEW_PRIVS`, then applies `ruleset` (if any) with
/// `landlock_restrict_self`. Async-signal-safe: for use between fork and exec.
///
/// # Safety
/// Only call in a freshly forked child before `exec`; `ruleset` must be a Landlock
/// ruleset fd.
pub unsafe fn restrict_self(ruleset: Option<std::os::fd::RawFd>) -> std::io::Result<()> {
    // SAFETY: plain syscalls on integers.
    unsafe {
        if libc::geteuid() == 0 {
            // An empty bounding set: no exec can bring the capabilities back. Numbers
            // past the kernel's last capability fail with EINVAL, which ends the loop.
            for cap in 0..64 {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    break;
                }
            }
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = ruleset {
            if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The interpreter's own folders: the prefix of its real executable (`<prefix>/bin/x`
/// holds its standard library) and, for a venv's python, the venv.
fn interpreter_paths(spec: &PluginSpec, program: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if launcher_kind(spec, program) == Runtime::Exec {
        return paths;
    }
    if let Ok(real) = std::fs::canonicalize(program) {
        if let Some(prefix) = real.parent().and_then(Path::parent) {
            if prefix != Path::new("/") {
                paths.push(prefix.to_path_buf());
            }
        }
    }
    if launcher_kind(spec, program) == Runtime::Python {
        if let Some(venv) = program.parent().and_then(Path::parent) {
            if venv.join("pyvenv.cfg").is_file() {
                paths.push(venv.to_path_buf());
            }
        }
    }
    paths
}

/// The folders a plugin's runtime reads besides the system roots: the interpreter's
/// prefix and, by asking the interpreter once, the paths it imports from. Cached per
/// runtime, program, folder, entry and module path variables: a restart reuses them
/// (a package linked into `node_modules` later is seen after a broker restart).
fn runtime_paths(
    spec: &PluginSpec,
    program: &Path,
    env: &[(String, String)],
    probe_ruleset: impl FnOnce() -> Result<OwnedFd, String>,
) -> Result<Vec<PathBuf>, String> {
    type Key = (&'static str, PathBuf, PathBuf, PathBuf, String);
    static CACHE: OnceLock<Mutex<HashMap<Key, Vec<PathBuf>>>> = OnceLock::new();
    let module_env: String = env
        .iter()
        .filter(|(k, _)| k == "PYTHONPATH" || k == "NODE_PATH" || k == "PYTHONHOME")
        .map(|(k, v)| format!("{k}={v};"))
        .collect();
    let key = (
        spec.runtime.as_str(),
        program.to_path_buf(),
        spec.dir.clone(),
        spec.entry.clone(),
        module_env,
    );
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap().get(&key) {
        return Ok(hit.clone());
    }
    // Built only when the interpreter has to be asked.
    let ruleset = match launcher_kind(spec, program) {
        Runtime::Exec | Runtime::Mcp => None,
        _ => Some(probe_ruleset()?),
    };
    let raw = ruleset.as_ref().map(|r| r.as_raw_fd());
    let paths = find_runtime_paths(spec, program, env, raw);
    cache.lock().unwrap().insert(key, paths.clone());
    Ok(paths)
}

fn find_runtime_paths(
    spec: &PluginSpec,
    program: &Path,
    env: &[(String, String)],
    probe_ruleset: Option<RawFd>,
) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let module_path = |name: &str| {
        env.iter()
            .filter(|(k, _)| k == name)
            .flat_map(|(_, v)| std::env::split_paths(v).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let Some(probe_ruleset) = probe_ruleset else {
        return paths;
    };
    match launcher_kind(spec, program) {
        Runtime::Python => {
            paths.extend(probe(program, PYTHON_PROBE, env, probe_ruleset));
            // `-I` keeps the probe from PYTHONPATH; the plugin imports from it.
            paths.extend(module_path("PYTHONPATH"));
        }
        Runtime::Node => {
            paths.extend(probe(program, NODE_PROBE, env, probe_ruleset));
            let mut seen = BTreeSet::new();
            node_modules_up(&spec.dir, &mut paths, &mut seen);
            if let Some(parent) = spec.entry.parent() {
                node_modules_up(parent, &mut paths, &mut seen);
            }
            for dir in module_path("NODE_PATH") {
                modules_dir(&dir, &mut paths, &mut seen);
            }
        }
        Runtime::Exec | Runtime::Mcp => {}
    }
    paths
}

/// How to find what a process reads: by its runtime, and for an MCP server's
/// `command` by its program's name (`python3`, `node`, …; anything else, `npx` and
/// `uvx` included, is treated as an executable).
fn launcher_kind(spec: &PluginSpec, program: &Path) -> Runtime {
    if spec.runtime != Runtime::Mcp {
        return spec.runtime;
    }
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with("python") {
        Runtime::Python
    } else if name == "node" || name == "nodejs" {
        Runtime::Node
    } else {
        Runtime::Exec
    }
}

/// What package runners that start MCP servers (`npx`, `uvx`, `bunx`, `pnpm dlx`,
/// `pipx`) need under the user's home: their caches and installed tools (written),
/// their config (read). Only those that exist; `(path, write)`.
fn launcher_paths(program: &Path, env: &[(String, String)]) -> Vec<(PathBuf, bool)> {
    let Some(home) = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
        .filter(|h| h.is_absolute() && h != Path::new("/"))
    else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, bool)> = [
        (".npm", true),
        (".cache", true),
        (".local/share/uv", true),
        (".local/share/pnpm", true),
        (".local/pipx", true),
        (".bun", true),
        (".npmrc", false),
        (".config/uv", false),
        (".local/bin", false),
        (".local/lib", false),
        (".nvm", false),
        (".volta", false),
        (".cargo/bin", false),
    ]
    .iter()
    .map(|(rel, write)| (home.join(rel), *write))
    .filter(|(path, _)| path.exists())
    .collect();
    // A program installed under the home (nvm's node, ~/.local/bin/uvx): its prefix.
    if let Some(prefix) = std::fs::canonicalize(program)
        .ok()
        .and_then(|real| real.parent().and_then(Path::parent).map(Path::to_path_buf))
        .filter(|prefix| prefix.starts_with(&home) && prefix != &home)
    {
        out.push((prefix, false));
    }
    out
}

/// Asks a Python interpreter where it imports from: `sys.path`, its prefixes, and the
/// source folders of editable installs (setuptools' finders keep them in `MAPPING`).
const PYTHON_PROBE: &[&str] = &[
    "-I",
    "-c",
    "import sys,json\n\
     p=set(x for x in sys.path if x)|{sys.prefix,sys.base_prefix,sys.exec_prefix}\n\
     for f in sys.meta_path:\n\
     \x20m=sys.modules.get(getattr(f,'__module__','') or '')\n\
     \x20mp=getattr(m,'MAPPING',None)\n\
     \x20if isinstance(mp,dict): p|=set(map(str,mp.values()))\n\
     print(json.dumps(sorted(p)))",
];

/// Asks Node where it loads from: its executable's prefix and the global folders.
const NODE_PROBE: &[&str] = &[
    "-e",
    "console.log(JSON.stringify([require('path').dirname(require('path').dirname(process.execPath))].concat(require('module').globalPaths)))",
];

/// Runs `program args` once per (program, args) and caches the JSON list of paths it
/// prints. `-I` keeps Python from adding the working directory; the probe runs with
/// the plugin's environment (PYTHONPATH, NODE_PATH). A failing probe grants nothing
/// extra (the plugin may then fail to start, and its log says what it could not read).
fn probe(program: &Path, args: &[&str], env: &[(String, String)], ruleset: RawFd) -> Vec<PathBuf> {
    type Probed = HashMap<(PathBuf, String), Vec<PathBuf>>;
    static CACHE: OnceLock<Mutex<Probed>> = OnceLock::new();
    // Only what locates programs and modules: nothing of the manifest's `env` that
    // could run code (NODE_OPTIONS, LD_PRELOAD, …) reaches the probe.
    let probe_env: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "PATH" | "HOME" | "LANG" | "NODE_PATH"))
        .cloned()
        .collect();
    let key_env: String = probe_env.iter().map(|(k, v)| format!("{k}={v};")).collect();
    let key = (program.to_path_buf(), key_env);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap().get(&key) {
        return hit.clone();
    }
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(probe_env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec (restrict_self).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
            restrict_self(Some(ruleset))
        });
    }
    let paths = run_bounded(command, PROBE_TIMEOUT)
        .and_then(|stdout| serde_json::from_slice::<Vec<String>>(&stdout).ok())
        .unwrap_or_default()
        .into_iter()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .collect::<Vec<_>>();
    cache.lock().unwrap().insert(key, paths.clone());
    paths
}

/// How long an interpreter probe may take before it is killed (and grants nothing).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `command` and returns its stdout if it exits 0 within `limit`; kills it
/// otherwise.
fn run_bounded(mut command: std::process::Command, limit: std::time::Duration) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut child = command.spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    // The probe prints a line of JSON: far below a pipe's buffer, so it never blocks
    // on a full pipe before it exits.
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(2)),
        }
    }
    let mut out = Vec::new();
    stdout.read_to_end(&mut out).ok()?;
    Some(out)
}

/// Every `node_modules` in `dir` and its ancestors, and the real folders of the
/// packages linked from them (npm workspaces, `npm link`), with their own ancestors'
/// `node_modules`.
fn node_modules_up(dir: &Path, out: &mut Vec<PathBuf>, seen: &mut BTreeSet<PathBuf>) {
    for ancestor in dir.ancestors() {
        modules_dir(&ancestor.join("node_modules"), out, seen);
    }
}

/// One folder of packages (a `node_modules`, or a `NODE_PATH` entry): itself, and the
/// real folders of the packages linked from it (npm workspaces, `npm link` inside a
/// project) with their ancestors' `node_modules`. A link only counts when its target
/// lies inside the folder that holds this `node_modules` (the workspace): a link to
/// anywhere else (`node_modules/x -> /home/me`) would widen the sandbox without the
/// manifest saying so, and needs `sandbox.read`.
fn modules_dir(modules: &Path, out: &mut Vec<PathBuf>, seen: &mut BTreeSet<PathBuf>) {
    if !seen.insert(modules.to_path_buf()) || !modules.is_dir() {
        return;
    }
    out.push(modules.to_path_buf());
    let Ok(entries) = std::fs::read_dir(modules) else {
        return;
    };
    let mut linked = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let scoped = entry.file_name().to_string_lossy().starts_with('@');
        let children: Vec<PathBuf> = if scoped {
            std::fs::read_dir(&path)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default()
        } else {
            vec![path]
        };
        let workspace = modules.parent().and_then(|p| std::fs::canonicalize(p).ok());
        for child in children.iter().filter(|child| child.is_symlink()) {
            match (std::fs::canonicalize(child), &workspace) {
                (Ok(real), Some(root)) if real.starts_with(root) => linked.push(real),
                (Ok(real), _) => tracing::debug!(
                    link = %child.display(),
                    target = %real.display(),
                    "package link leaves its workspace: not granted (add it to sandbox.read)"
                ),
                _ => {}
            }
        }
    }
    for real in linked {
        if seen.insert(real.clone()) {
            out.push(real.clone());
            if let Some(parent) = real.parent() {
                node_modules_up(parent, out, seen);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broad_grant_is_split_around_a_protected_subtree() {
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        for dir in ["a/data/x", "a/b", "c"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        std::fs::write(base.join("a/file"), "f").unwrap();
        let protected = vec![base.join("a/data")];
        let mut grants = Grants::default();
        grants.add_except(&base, &protected, false, true);
        let got: Vec<_> = grants
            .read
            .iter()
            .map(|p| p.strip_prefix(&base).unwrap().display().to_string())
            .collect();
        assert_eq!(got, ["a/b", "a/file", "c"]);
        assert!(grants.refused.is_empty());

        let mut inside = Grants::default();
        inside.add_except(&base.join("a/data/x"), &protected, true, true);
        assert!(inside.write.is_empty());
        assert_eq!(inside.refused, [base.join("a/data/x")]);
    }

    #[test]
    fn a_link_to_a_protected_folder_is_not_granted() {
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        std::fs::create_dir_all(base.join("data")).unwrap();
        std::fs::create_dir_all(base.join("open")).unwrap();
        std::os::unix::fs::symlink(base.join("data"), base.join("open/link")).unwrap();
        let mut grants = Grants::default();
        grants.add_except(&base.join("open/link"), &[base.join("data")], false, false);
        assert!(grants.read.is_empty());
    }

    #[test]
    fn a_plugin_folder_is_granted_only_as_a_real_folder() {
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        std::fs::create_dir_all(base.join("real/plugin-data/p")).unwrap();
        // A data dir reached through a link of the operator's: fine.
        std::os::unix::fs::symlink(base.join("real"), base.join("linked")).unwrap();
        assert_eq!(
            plain_child(&base.join("linked/plugin-data/p")),
            Some(base.join("real/plugin-data/p"))
        );
        // A plugin folder that is itself a link (into the data dir, say): refused.
        std::os::unix::fs::symlink(base.join("real"), base.join("real/plugin-data/q")).unwrap();
        assert_eq!(plain_child(&base.join("real/plugin-data/q")), None);
        assert_eq!(plain_child(&base.join("real/plugin-data/missing")), None);
    }

    #[test]
    fn states_read_as_plugins_list_shows_them() {
        let on = SandboxState::Landlock {
            abi: 6,
            ports: Some(vec![443, 8080]),
        };
        assert_eq!(on.to_string(), "landlock v6, tcp 443,8080");
        assert_eq!(SandboxState::OptedOut.to_string(), "off (plugin.json)");
    }
}
