//! `hearth new python|node|rust NAME [--style …]`: writes a plugin folder — `plugin.json`,
//! the code, a README and a test that passes out of the box with only the SDK package
//! installed (`pytest`, `node --test`, `cargo test`), using the SDK's `testing` harness
//! (no broker needed).
//!
//! Templates live in `broker/templates/` and are compiled in. Placeholders:
//! `__NAME__` (the plugin name), `__TOOL__` (its one tool: the plugin name for LinkZone,
//! whose tool is named after the plugin; the name with `-` as `_` otherwise),
//! `__CRATE__` (the Rust crate's library name), `__SDK_VERSION__` (the SDK version
//! these templates were written for).

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
}

/// Plugin styles (each SDK offers the seeds' own styles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Style {
    /// `@plugin.tool` on typed functions (Python only).
    Decorator,
    /// LinkZone: `metadata` + `execute_tool` / `executeTool` (Python, Node).
    Linkzone,
    /// HomeAgent: `start(sdk)` + `register_tool` (Python, Node, Rust).
    Homeagent,
    /// Cyrene: a `Tool` with definition and execute (Rust only).
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
    /// Style (default: decorator for Python, linkzone for Node, cyrene for Rust).
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
    });
    let files = render(args.language, style, &args.name)?;
    let dir = args.dir.join(&args.name);
    write_folder(&dir, &files)?;
    let shown = dir.display();
    println!(
        "created {shown}/ ({} plugin, {} style)",
        language_name(args.language),
        style.as_str()
    );
    for (path, _) in &files {
        println!("  {path}");
    }
    println!("\nnext (until hearth-plugin is on PyPI, npm and crates.io, install it from a Hearth");
    println!("checkout or its built packages instead: see the README's \"Write a plugin\"):");
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
    }
    Ok(ExitCode::SUCCESS)
}

fn language_name(language: Language) -> &'static str {
    match language {
        Language::Python => "Python",
        Language::Node => "Node",
        Language::Rust => "Rust",
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

/// The files of a new plugin folder.
///
/// # Errors
/// A bad name, or a style the language does not have (the message lists the ones it has).
pub fn render(language: Language, style: Style, name: &str) -> anyhow::Result<Vec<File>> {
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
        (language, style) => {
            let has = match language {
                Language::Python => "decorator, linkzone, homeagent",
                Language::Node => "linkzone, homeagent",
                Language::Rust => "cyrene, homeagent",
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
        for bad in ["", "9lives", "a b", "a/b", "ü", &"x".repeat(65)] {
            let err = render(Language::Python, Style::Decorator, bad).unwrap_err();
            assert!(
                err.to_string().contains("letters, digits"),
                "{bad:?}: {err}"
            );
        }
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
