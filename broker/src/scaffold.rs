//! `hearth new python|node|rust|go NAME [--style …]`: writes a plugin folder —
//! `plugin.json`, the code, a README and a test that passes out of the box with only the
//! SDK package installed (`pytest`, `node --test`, `cargo test`, `go test ./...`), using
//! the SDK's `testing` harness (no broker needed).
//!
//! A Go plugin is a module of its own (`module NAME`) whose `plugin.json` has a `build`
//! step (`go build -buildvcs=false -o bin/plugin .`, run by the broker, see
//! `supervisor::build`). Until the Go SDK is published its `go.mod` takes it from the
//! Hearth checkout this `hearth` comes from ([`sdk_go_dir`]) with a `replace` line, and
//! `go mod tidy` completes `go.mod` and writes `go.sum` when `go` is on `PATH`.
//!
//! Templates live in `broker/templates/` and are compiled in. Placeholders:
//! `__NAME__` (the plugin name), `__TOOL__` (its one tool: the plugin name for LinkZone,
//! whose tool is named after the plugin; the name with `-` as `_` otherwise),
//! `__CRATE__` (the Rust crate's library name), `__SDK_VERSION__` (the SDK version
//! these templates were written for), `__REPLACE__` (Go: the `replace` of the SDK).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};

/// The SDK packages' version the templates depend on (`hearth-plugin` on PyPI, npm and
/// crates.io), the workspace's version.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Languages of `hearth new`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    /// Python 3.10+, package `hearth-plugin` (import `hearth_plugin`).
    Python,
    /// Node 20+, package `hearth-plugin`.
    Node,
    /// Rust, crate `hearth-plugin`.
    Rust,
    /// Go 1.26+, module `github.com/hearth-dev/hearth/sdk-go` (from this Hearth
    /// checkout until it is published).
    Go,
}

/// Plugin styles (each SDK offers the seeds' own styles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Style {
    /// `@plugin.tool` on typed functions (Python only).
    Decorator,
    /// LinkZone: `metadata` + `execute_tool` / `executeTool` (Python, Node).
    Linkzone,
    /// HomeAgent: `start(sdk)` + `register_tool` (Python, Node, Rust, Go).
    Homeagent,
    /// Cyrene: a `Tool` with definition and execute (Rust, Go).
    Cyrene,
}

impl Style {
    fn as_str(self) -> &'static str {
        match self {
            Style::Decorator => "decorator",
            Style::Linkzone => "linkzone",
            Style::Homeagent => "homeagent",
            Style::Cyrene => "cyrene",
        }
    }
}

/// `hearth new` arguments.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// Language of the plugin.
    #[arg(value_enum)]
    pub language: Language,
    /// Plugin name: letters, digits, `_` and `-`, starting with a letter (at most 64);
    /// also the folder's name.
    pub name: String,
    /// Style (default: decorator for Python, linkzone for Node, cyrene for Rust,
    /// homeagent for Go).
    #[arg(long, value_enum)]
    pub style: Option<Style>,
    /// Folder to create the plugin folder in (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

/// One file of a plugin folder: path relative to the folder, and its text.
type File = (&'static str, String);

/// Runs `hearth new`: writes the folder and prints what to do next.
///
/// # Errors
/// A bad name, a style the language does not have, a folder that exists and is not
/// empty, or a write that fails (the message names the path).
pub fn new_command(args: NewArgs) -> anyhow::Result<ExitCode> {
    let style = args.style.unwrap_or(match args.language {
        Language::Python => Style::Decorator,
        Language::Node => Style::Linkzone,
        Language::Rust => Style::Cyrene,
        Language::Go => Style::Homeagent,
    });
    let sdk_go = sdk_go_dir();
    let files = render_with(args.language, style, &args.name, sdk_go.as_deref())?;
    let dir = args.dir.join(&args.name);
    write_folder(&dir, &files)?;
    let tidied = args.language == Language::Go && go_mod_tidy(&dir);
    let shown = dir.display();
    println!(
        "created {shown}/ ({} plugin, {} style)",
        language_name(args.language),
        style.as_str()
    );
    for (path, _) in &files {
        println!("  {path}");
    }
    if tidied {
        println!("  go.sum (go mod tidy)");
    }
    if args.language == Language::Go {
        match &sdk_go {
            Some(sdk) => println!("\ngo.mod takes the Go SDK from this Hearth checkout ({}) with a `replace`\nline; drop it once github.com/hearth-dev/hearth/sdk-go is published.", sdk.display()),
            None => println!("\nno Hearth checkout found next to this `hearth` (nor HEARTH_SDK_GO): add\n  replace github.com/hearth-dev/hearth/sdk-go => /path/to/hearth/sdk-go\nto go.mod until the Go SDK is published, then run `go mod tidy`."),
        }
        if !tidied && sdk_go.is_some() {
            println!("run `go mod tidy` in {shown} (it completes go.mod and writes go.sum)");
        }
        println!("\nnext:");
    } else {
        println!(
            "\nnext (until hearth-plugin is on PyPI, npm and crates.io, install it from a Hearth"
        );
        println!("checkout or its built packages instead: see the README's \"Write a plugin\"):");
    }
    println!("  cd {shown}");
    match args.language {
        Language::Python => {
            println!("  python3 -m venv .venv && .venv/bin/pip install hearth-plugin pytest");
            println!("  .venv/bin/pytest                       # tests, no broker needed");
            println!("  hearth dev .                           # broker + scripted LLM (on .venv's Python), reload on save");
        }
        Language::Node => {
            println!("  npm install");
            println!("  npm test                               # tests, no broker needed");
            println!(
                "  hearth dev .                           # broker + scripted LLM, reload on save"
            );
        }
        Language::Rust => {
            println!("  cargo test                             # tests, no broker needed");
            println!("  hearth dev .                           # builds, starts a broker + scripted LLM, rebuilds on save");
        }
        Language::Go => {
            println!("  go test ./...                          # tests, no broker needed");
            println!("  hearth dev .                           # the broker builds it (plugin.json `build`), runs it with a scripted LLM, rebuilds on save");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The Go SDK module's path in Go source.
pub const SDK_GO_MODULE: &str = "github.com/hearth-dev/hearth/sdk-go";

/// The `sdk-go` folder of the Hearth checkout this `hearth` comes from, absolute: from
/// `HEARTH_SDK_GO` if set, else the nearest `sdk-go/go.mod` above the running binary
/// (`<checkout>/target/debug/hearth`), else the checkout it was built in. `None` when
/// there is none (an installed binary without a checkout).
pub fn sdk_go_dir() -> Option<PathBuf> {
    let has_module = |dir: &Path| dir.join("go.mod").is_file();
    if let Some(dir) = std::env::var_os("HEARTH_SDK_GO").map(PathBuf::from) {
        return Some(std::path::absolute(&dir).unwrap_or(dir));
    }
    let beside_binary = std::env::current_exe()
        .ok()
        .and_then(|exe| std::fs::canonicalize(exe).ok())
        .and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .map(|a| a.join("sdk-go"))
                .find(|d| has_module(d))
        });
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|checkout| checkout.join("sdk-go"))
        .filter(|d| has_module(d));
    beside_binary.or(built_in)
}

/// Runs `go mod tidy` in `dir` (a new Go plugin): it lists the SDK's dependencies in
/// `go.mod` and writes `go.sum`, from the module cache or the module proxy. False (with
/// what went wrong on stderr) when `go` is missing or tidy fails.
fn go_mod_tidy(dir: &Path) -> bool {
    match std::process::Command::new("go")
        .args(["mod", "tidy"])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "warning: `go mod tidy` in {} failed:\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
            false
        }
        Err(e) => {
            eprintln!("warning: cannot run `go mod tidy` ({e}); is Go on PATH?");
            false
        }
    }
}

fn language_name(language: Language) -> &'static str {
    match language {
        Language::Python => "Python",
        Language::Node => "Node",
        Language::Rust => "Rust",
        Language::Go => "Go",
    }
}

/// Checks a `hearth new` plugin name; the error says what is allowed.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok {
        bail!("plugin name {name:?}: use letters, digits, `_` and `-`, starting with a letter (at most 64 characters), e.g. `greeter` or `my-tools`");
    }
    Ok(())
}

/// The files of a new plugin folder; a Go plugin's `go.mod` takes the SDK from the
/// checkout [`sdk_go_dir`] finds.
///
/// # Errors
/// A bad name, or a style the language does not have (the message lists the ones it has).
pub fn render(language: Language, style: Style, name: &str) -> anyhow::Result<Vec<File>> {
    render_with(language, style, name, sdk_go_dir().as_deref())
}

/// [`render`] with the Go SDK at `sdk_go` (`None`: no `replace` line, a comment instead).
fn render_with(
    language: Language,
    style: Style,
    name: &str,
    sdk_go: Option<&Path>,
) -> anyhow::Result<Vec<File>> {
    check_name(name)?;
    let ident = name.replace('-', "_");
    let tool = if style == Style::Linkzone {
        name.to_string()
    } else {
        ident.clone()
    };
    let fill = |text: &str| {
        text.replace("__NAME__", name)
            .replace("__TOOL__", &tool)
            .replace("__CRATE__", &ident)
            .replace("__SDK_VERSION__", SDK_VERSION)
            .replace("__STYLE__", style.as_str())
    };
    let code = match (language, style) {
        (Language::Python, Style::Decorator) => include_str!("../templates/python/decorator.py"),
        (Language::Python, Style::Linkzone) => include_str!("../templates/python/linkzone.py"),
        (Language::Python, Style::Homeagent) => include_str!("../templates/python/homeagent.py"),
        (Language::Node, Style::Linkzone) => include_str!("../templates/node/linkzone.js"),
        (Language::Node, Style::Homeagent) => include_str!("../templates/node/homeagent.js"),
        (Language::Rust, Style::Cyrene) => include_str!("../templates/rust/cyrene.rs"),
        (Language::Rust, Style::Homeagent) => include_str!("../templates/rust/homeagent.rs"),
        (Language::Go, Style::Homeagent) => include_str!("../templates/go/homeagent.go"),
        (Language::Go, Style::Cyrene) => include_str!("../templates/go/cyrene.go"),
        (language, style) => {
            let has = match language {
                Language::Python => "decorator, linkzone, homeagent",
                Language::Node => "linkzone, homeagent",
                Language::Rust => "cyrene, homeagent",
                Language::Go => "homeagent, cyrene",
            };
            bail!(
                "--style {}: {} plugins come in these styles: {has}",
                style.as_str(),
                language_name(language)
            );
        }
    };
    let manifest = |runtime: &str, entry: &str| {
        let quoted = |v: &str| serde_json::Value::from(v).to_string();
        format!(
            "{{\n  \"name\": {},\n  \"version\": \"0.1.0\",\n  \"description\": {},\n  \"runtime\": {},\n  \"entry\": {}\n}}\n",
            quoted(name),
            quoted(&format!("{name}: says hello")),
            quoted(runtime),
            quoted(entry)
        )
    };
    let replace = match sdk_go {
        Some(dir) => format!(
            "\n// Until the Go SDK is published, it comes from the Hearth checkout `hearth new go`\n// ran from. Once it is (tag sdk-go/vX.Y.Z), drop this line and run\n// `go get {SDK_GO_MODULE}@latest`.\nreplace {SDK_GO_MODULE} => {}\n",
            dir.display()
        ),
        None => format!(
            "\n// Until the Go SDK is published, take it from a Hearth checkout:\n// replace {SDK_GO_MODULE} => /path/to/hearth/sdk-go\n"
        ),
    };
    let files = match language {
        Language::Python => vec![
            ("plugin.json", manifest("python", "main.py")),
            ("main.py", fill(code)),
            (
                "test_main.py",
                fill(include_str!("../templates/python/test_main.py")),
            ),
            ("requirements.txt", fill("hearth-plugin>=__SDK_VERSION__\n")),
            (
                "README.md",
                fill(include_str!("../templates/python/README.md")),
            ),
            (".gitignore", ".venv/\n__pycache__/\n".to_string()),
        ],
        Language::Node => vec![
            ("plugin.json", manifest("node", "index.js")),
            ("index.js", fill(code)),
            (
                "package.json",
                fill(include_str!("../templates/node/package.json")),
            ),
            (
                "test/plugin.test.js",
                fill(include_str!("../templates/node/plugin.test.js")),
            ),
            (
                "README.md",
                fill(include_str!("../templates/node/README.md")),
            ),
            (".gitignore", "node_modules/\n".to_string()),
        ],
        Language::Rust => vec![
            (
                "plugin.json",
                manifest("exec", &format!("target/debug/{name}")),
            ),
            (
                "Cargo.toml",
                fill(include_str!("../templates/rust/Cargo.toml")),
            ),
            ("src/lib.rs", fill(code)),
            (
                "src/main.rs",
                fill(include_str!("../templates/rust/main.rs")),
            ),
            (
                "tests/plugin.rs",
                fill(include_str!("../templates/rust/plugin_test.rs")),
            ),
            (
                "README.md",
                fill(include_str!("../templates/rust/README.md")),
            ),
            (".gitignore", "target/\n".to_string()),
        ],
        Language::Go => vec![
            (
                "plugin.json",
                format!(
                    "{{\n  \"name\": {},\n  \"version\": \"0.1.0\",\n  \"description\": {},\n  \"runtime\": \"exec\",\n  \"entry\": \"bin/plugin\",\n  \"build\": [\"go\", \"build\", \"-buildvcs=false\", \"-o\", \"bin/plugin\", \".\"]\n}}\n",
                    serde_json::Value::from(name),
                    serde_json::Value::from(format!("{name}: says hello")),
                ),
            ),
            (
                "go.mod",
                fill(include_str!("../templates/go/go.mod")).replace("__REPLACE__\n", &replace),
            ),
            ("main.go", fill(code)),
            (
                "main_test.go",
                fill(include_str!("../templates/go/main_test.go")),
            ),
            ("README.md", fill(include_str!("../templates/go/README.md"))),
            (".gitignore", "bin/\n".to_string()),
        ],
    };
    Ok(files)
}

/// Creates `dir` (which must not exist, or be empty) and writes `files` into it.
fn write_folder(dir: &Path, files: &[File]) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{}: the folder exists and is not empty; choose another name or --dir",
                    dir.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) if dir.exists() && !dir.is_dir() => bail!(
            "{}: exists and is not a folder; choose another name or --dir",
            dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    }
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_and_style_renders_without_placeholders_left() {
        for (language, styles) in [
            (
                Language::Python,
                &[Style::Decorator, Style::Linkzone, Style::Homeagent][..],
            ),
            (Language::Node, &[Style::Linkzone, Style::Homeagent][..]),
            (Language::Rust, &[Style::Cyrene, Style::Homeagent][..]),
            (Language::Go, &[Style::Homeagent, Style::Cyrene][..]),
        ] {
            for &style in styles {
                let files = render(language, style, "my-tool").unwrap();
                for (path, text) in &files {
                    for left in [
                        "__NAME__",
                        "__TOOL__",
                        "__CRATE__",
                        "__SDK_VERSION__",
                        "__STYLE__",
                        "__REPLACE__",
                    ] {
                        assert!(
                            !text.contains(left),
                            "{language:?}/{style:?} {path}: {text}"
                        );
                    }
                }
                let manifest: serde_json::Value =
                    serde_json::from_str(&files[0].1).expect("plugin.json");
                assert_eq!(manifest["name"], "my-tool");
            }
        }
    }

    #[test]
    fn a_style_the_language_lacks_and_a_bad_name_are_refused_with_what_is_allowed() {
        let err = render(Language::Node, Style::Decorator, "x").unwrap_err();
        assert!(err.to_string().contains("linkzone, homeagent"), "{err}");
        let err = render(Language::Rust, Style::Linkzone, "x").unwrap_err();
        assert!(err.to_string().contains("cyrene, homeagent"), "{err}");
        let err = render(Language::Go, Style::Decorator, "x").unwrap_err();
        assert!(err.to_string().contains("homeagent, cyrene"), "{err}");
        for bad in ["", "9lives", "a b", "a/b", "ü", &"x".repeat(65)] {
            let err = render(Language::Python, Style::Decorator, bad).unwrap_err();
            assert!(
                err.to_string().contains("letters, digits"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn a_go_plugin_is_a_module_built_by_the_broker_on_this_checkouts_sdk() {
        let sdk = Path::new("/src/hearth/sdk-go");
        let files = render_with(Language::Go, Style::Homeagent, "my-tool", Some(sdk)).unwrap();
        let file = |name: &str| &files.iter().find(|(p, _)| *p == name).unwrap().1;
        let manifest: serde_json::Value = serde_json::from_str(file("plugin.json")).unwrap();
        assert_eq!(manifest["runtime"], "exec");
        assert_eq!(manifest["entry"], "bin/plugin");
        assert_eq!(
            manifest["build"],
            serde_json::json!(["go", "build", "-buildvcs=false", "-o", "bin/plugin", "."])
        );
        let gomod = file("go.mod");
        assert!(
            gomod.starts_with("module my-tool\n\ngo 1.26.0\n"),
            "{gomod}"
        );
        assert!(
            gomod.contains("require github.com/hearth-dev/hearth/sdk-go v0.0.0\n"),
            "{gomod}"
        );
        assert!(
            gomod.contains("\nreplace github.com/hearth-dev/hearth/sdk-go => /src/hearth/sdk-go\n"),
            "{gomod}"
        );
        assert!(gomod.contains("drop this line"), "{gomod}");
        let main = file("main.go");
        assert!(main.contains("s.RegisterTool(\"my_tool\""), "{main}");
        assert!(
            main.contains("func main() {\n\thearth.Serve(&Greeter{})\n}"),
            "{main}"
        );
        assert!(file("main_test.go").contains("hearthtest"));
        // Without a checkout: a comment saying what to add.
        let files = render_with(Language::Go, Style::Cyrene, "x", None).unwrap();
        let gomod = &files.iter().find(|(p, _)| *p == "go.mod").unwrap().1;
        assert!(
            gomod.contains(
                "// replace github.com/hearth-dev/hearth/sdk-go => /path/to/hearth/sdk-go"
            ),
            "{gomod}"
        );
        assert!(!gomod.lines().any(|l| l.starts_with("replace")), "{gomod}");
    }

    #[test]
    fn a_folder_that_is_not_empty_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("hearth-new-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "mine").unwrap();
        let files = render(Language::Python, Style::Decorator, "x").unwrap();
        let err = write_folder(&dir, &files).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        assert!(!dir.join("main.py").exists());
        let file = dir.join("keep.txt");
        let err = write_folder(&file, &files).unwrap_err();
        assert!(err.to_string().contains("is not a folder"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
