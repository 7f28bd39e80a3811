//! `hearth chat` and `hearth inject`: the client side of the `Agent` service.
//!
//! `hearth chat MESSAGE` prints one exchange as it streams: tool calls as they start
//! and finish (`⚙ tool {args}` / `  ↳ result`), the reply's text deltas as they
//! arrive (on a terminal, a tool's progress on a status line redrawn in place until
//! the tool finishes), plugins' replies (`[plugin] text`, LinkZone `sender.reply`; replies that
//! take the place of an inject command the LLM wrote arrive inside the reply's own
//! text), and the final text again if hooks rewrote it. When the turn has to wait
//! (other turns of the conversation ahead, or every turn slot taken), a line on
//! stderr says so. A tool whose `ai.tool` policy is `confirm` is
//! asked about on the terminal (`Run tool … ? [y/N]`; `--yes` approves without
//! asking; no terminal, or no answer in time, is a no). Without MESSAGE it is a REPL
//! with line editing and history (`<data_dir>/chat_history`); when stdin is not a
//! terminal it reads one message per line. `--json` prints every event as one JSON
//! object per line (`tool_call_progress` included); piped without `--json` progress is
//! not printed. A turn that failed exits with status 1 and the error on stderr;
//! with stdin not a terminal, every line is a turn and the exit status is 1 when any
//! of them failed (`error: 2 of 3 turns failed` on stderr after the last).
//! On a terminal, control and bidi characters of the LLM's and plugins' text are
//! shown escaped, newlines and tabs kept (`--raw` prints them as they are; see
//! [`crate::term`]).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use hearth_proto::v1::{
    chat_event::Event, AgentInjectRequest, ChatRequest, ConfirmRequest, ConfirmResponse, Priority,
    ToolCallProgress,
};
use serde_json::json;

use crate::cli::{status_error, AdminConn};
use crate::term::Printer;

/// Arguments of `hearth chat`.
#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// The message; without it, a REPL.
    pub message: Option<String>,
    /// Who speaks.
    #[arg(long, default_value = "user")]
    pub user: String,
    /// Group (a group's conversation is shared by its members).
    #[arg(long, default_value = "")]
    pub group: String,
    /// Channel.
    #[arg(long, default_value = "cli")]
    pub channel: String,
    /// Leave this exchange out of TextMemory.
    #[arg(long)]
    pub no_memory: bool,
    /// Print every event as a JSON line.
    #[arg(long)]
    pub json: bool,
    /// Approve every tool call that asks for confirmation (`ai.tool` `confirm`)
    /// without asking.
    #[arg(long)]
    pub yes: bool,
    /// Scheduling priority when turns wait for a slot (default: interactive).
    #[arg(long, value_enum)]
    pub priority: Option<PriorityArg>,
}

/// A priority level on the command line (seed levels 1–4).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PriorityArg {
    /// 1: runs when nothing more urgent waits.
    Background,
    /// 2: a message from a chat platform.
    Message,
    /// 3: a user waiting at a client.
    Interactive,
    /// 4: before everything else.
    Critical,
}

impl PriorityArg {
    fn wire(self) -> i32 {
        (match self {
            PriorityArg::Background => Priority::Background,
            PriorityArg::Message => Priority::Message,
            PriorityArg::Interactive => Priority::Interactive,
            PriorityArg::Critical => Priority::Critical,
        }) as i32
    }
}

/// Arguments of `hearth inject`.
#[derive(Debug, clap::Args)]
pub struct InjectArgs {
    /// The text.
    pub text: String,
    /// Who injects.
    #[arg(long, default_value = "cli")]
    pub source: String,
    /// Channel.
    #[arg(long, default_value = "cli")]
    pub channel: String,
    /// The user whose private conversation (on `--channel`) gets the input
    /// (default: the source).
    #[arg(long, default_value = "")]
    pub user: String,
    /// The group whose conversation (on `--channel`) gets the input.
    #[arg(long, default_value = "")]
    pub group: String,
    /// Cut into the running turn of that conversation (cancelling its LLM request in
    /// flight), or go to the front of its queue when none runs.
    #[arg(long)]
    pub interrupt: bool,
    /// Leave it out of TextMemory.
    #[arg(long)]
    pub no_memory: bool,
    /// Scheduling priority (default: background; an interrupt is critical).
    #[arg(long, value_enum)]
    pub priority: Option<PriorityArg>,
    /// Print JSON: conversation, ahead, interrupted.
    #[arg(long)]
    pub json: bool,
}

/// Runs one exchange; Ok(false) when the turn ended with an error.
async fn exchange(conn: &mut AdminConn, args: &ChatArgs, message: &str) -> anyhow::Result<bool> {
    let req = conn.with_token(ChatRequest {
        message: message.to_string(),
        user_id: args.user.clone(),
        group_id: args.group.clone(),
        channel: args.channel.clone(),
        no_memory: args.no_memory,
        priority: args.priority.map_or(0, PriorityArg::wire),
    });
    let mut events = conn
        .agent()
        .chat(req)
        .await
        .map_err(status_error)?
        .into_inner();
    let mut streamed = String::new();
    // Everything shown so far (deltas and plugin replies), to not print it twice.
    let mut shown = String::new();
    let mut ok = true;
    let (term, err_term) = (Printer::stdout(), Printer::stderr());
    let mut status = StatusLine::new(!args.json);
    loop {
        let ev = match events.message().await {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(e) => {
                // The error goes to stderr on a line of its own, not after a half line
                // of streamed text.
                status.erase()?;
                if !args.json && !streamed.is_empty() && !streamed.ends_with('\n') {
                    println!();
                }
                return Err(status_error(e));
            }
        };
        let Some(e) = ev.event else { continue };
        if let Event::ToolCallProgress(p) = &e {
            if args.json {
                println!("{}", event_json(&e));
            } else {
                status.progress(p, &term)?;
            }
            continue;
        }
        // Anything else is printed on a line of its own.
        status.erase()?;
        if let Event::ConfirmRequest(c) = &e {
            if args.json {
                println!("{}", event_json(&e));
            }
            let approved = ask_confirm(c, args.yes).await;
            let answer = conn.with_token(ConfirmResponse {
                confirm_id: c.confirm_id.clone(),
                approved,
            });
            if let Err(s) = conn.agent().confirm(answer).await {
                eprintln!("confirm: {}", err_term.line(s.message()));
            }
            continue;
        }
        let mut out = std::io::stdout().lock();
        if args.json {
            writeln!(out, "{}", event_json(&e))?;
            if let Event::Final(f) = &e {
                ok = f.error.is_empty();
            }
            continue;
        }
        match e {
            Event::TextDelta(d) if !d.reasoning => {
                streamed.push_str(&d.text);
                shown.push_str(&d.text);
                write!(out, "{}", term.text(&d.text))?;
                out.flush()?;
            }
            Event::TextDelta(_) => {}
            Event::ToolCallStarted(t) => {
                if !streamed.is_empty() && !streamed.ends_with('\n') {
                    writeln!(out)?;
                }
                streamed.clear();
                writeln!(out, "⚙ {} {}", term.line(&t.tool), term.line(&t.args_json))?;
            }
            Event::ToolCallFinished(t) => {
                let text = if t.success { &t.content } else { &t.error };
                let first = text.lines().next().unwrap_or("");
                let mark = if t.success { "↳" } else { "✗" };
                writeln!(out, "  {mark} {}: {}", term.line(&t.tool), term.line(first))?;
                drop(out);
                // Tools still running show their progress again.
                status.finished(&t.call_id)?;
            }
            Event::ShortCircuit(s) => {
                writeln!(
                    out,
                    "[{} of plugin {} answered]",
                    term.line(&s.stage),
                    term.line(&s.plugin)
                )?;
            }
            Event::Interrupted(i) => {
                writeln!(
                    out,
                    "\n[interrupted by {}: {}]",
                    term.line(&i.source),
                    term.text(&i.text)
                )?;
                streamed.clear();
            }
            // Its text arrives in the reply's own stream, in place.
            Event::PluginReply(r) if r.inline => {}
            Event::PluginReply(r) => {
                if !streamed.is_empty() && !streamed.ends_with('\n') {
                    writeln!(out)?;
                }
                streamed.clear();
                writeln!(out, "[{}] {}", term.line(&r.plugin), term.text(&r.text))?;
                shown.push('\n');
                shown.push_str(&r.text);
            }
            Event::Queued(q) => {
                if !q.held_by.is_empty() {
                    eprintln!(
                        "… waiting: broker {} is running a turn of {}",
                        err_term.line(&q.held_by),
                        err_term.line(&q.conversation)
                    );
                } else if q.ahead > 0 {
                    eprintln!(
                        "… waiting: {} of {} ahead",
                        crate::term::count(q.ahead as usize, "turn", "turns"),
                        err_term.line(&q.conversation)
                    );
                } else {
                    eprintln!("… waiting for a free turn slot (max_concurrent_turns)");
                }
            }
            Event::Final(f) => {
                let new_text = f
                    .text
                    .lines()
                    .any(|l| !l.trim().is_empty() && !shown.contains(l.trim()));
                if !f.error.is_empty() {
                    if !streamed.is_empty() {
                        writeln!(out)?;
                    }
                    eprintln!("error: {}", err_term.line(&f.error));
                    ok = false;
                } else if new_text {
                    if !streamed.is_empty() {
                        writeln!(out)?;
                    }
                    writeln!(out, "{}", term.text(&f.text))?;
                } else {
                    writeln!(out)?;
                }
            }
            Event::ConfirmRequest(_) | Event::ToolCallProgress(_) => {}
        }
    }
    status.erase()?;
    Ok(ok)
}

/// The status line of `hearth chat` on a terminal: the latest progress of a running
/// tool (`⚙ tool … 3/10 message`), redrawn in place and erased before anything else
/// is printed; when a tool finishes, the progress of another still running comes
/// back. Off (no terminal, or --json): progress is not shown.
struct StatusLine {
    on: bool,
    /// Running tools with progress, the latest last: (call id, line).
    running: Vec<(String, String)>,
    drawn: bool,
}

impl StatusLine {
    fn new(wanted: bool) -> StatusLine {
        use std::io::IsTerminal;
        StatusLine {
            on: wanted && std::io::stdout().is_terminal(),
            running: Vec::new(),
            drawn: false,
        }
    }

    fn progress(&mut self, p: &ToolCallProgress, term: &Printer) -> std::io::Result<()> {
        if !self.on {
            return Ok(());
        }
        let line = format!(
            "⚙ {} … {}",
            term.line(&p.tool),
            progress_text(p.progress, p.total, &term.line(&p.message))
        );
        self.running.retain(|(id, _)| *id != p.call_id);
        self.running.push((p.call_id.clone(), line));
        self.draw()
    }

    /// Call `call_id` finished (its line is printed): show another's progress.
    fn finished(&mut self, call_id: &str) -> std::io::Result<()> {
        self.running.retain(|(id, _)| id != call_id);
        self.draw()
    }

    fn draw(&mut self) -> std::io::Result<()> {
        let Some((_, line)) = self.running.last() else {
            return Ok(());
        };
        let mut out = std::io::stdout().lock();
        write!(out, "\r\x1b[2K{}", fit(line, columns().saturating_sub(1)))?;
        out.flush()?;
        self.drawn = true;
        Ok(())
    }

    fn erase(&mut self) -> std::io::Result<()> {
        if self.drawn {
            let mut out = std::io::stdout().lock();
            write!(out, "\r\x1b[2K")?;
            out.flush()?;
            self.drawn = false;
        }
        Ok(())
    }
}

/// `3/10 message`, `42% message` (a total of 1 is a fraction), `3 message` or
/// `message` (total unknown).
fn progress_text(progress: f64, total: f64, message: &str) -> String {
    let amount = if total > 0.0 && (total - 1.0).abs() < f64::EPSILON {
        format!("{:.0}%", progress.clamp(0.0, 1.0) * 100.0)
    } else if total > 0.0 {
        format!("{progress}/{total}")
    } else if progress > 0.0 {
        progress.to_string()
    } else {
        String::new()
    };
    match (amount.is_empty(), message.is_empty()) {
        (true, _) => message.to_string(),
        (false, true) => amount,
        (false, false) => format!("{amount} {message}"),
    }
}

/// The terminal's width in columns (80 when unknown).
fn columns() -> usize {
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        80
    }
}

/// `line` cut to `width` columns (East Asian wide characters count two), with `…`
/// when cut: a status line that wraps cannot be redrawn in place.
fn fit(line: &str, width: usize) -> String {
    let wide = |c: char| {
        matches!(c as u32, 0x1100..=0x115F | 0x2E80..=0xA4CF | 0xAC00..=0xD7A3 | 0xF900..=0xFAFF
            | 0xFE30..=0xFE4F | 0xFF00..=0xFF60 | 0xFFE0..=0xFFE6 | 0x1F300..=0x1FAFF | 0x20000..=0x3FFFD)
    };
    let columns = |c: char| if wide(c) { 2 } else { 1 };
    if line.chars().map(columns).sum::<usize>() <= width {
        return line.to_string();
    }
    let mut used = 0;
    let mut out = String::new();
    for c in line.chars() {
        // Room for the `…`.
        if used + columns(c) + 1 > width {
            break;
        }
        used += columns(c);
        out.push(c);
    }
    out.push('…');
    out
}

/// A chat event as one JSON object: the lines of `hearth chat --json` (and of the admin
/// page's chat stream), `{"type": "text_delta" | "tool_call_started" | …, …}`.
pub(crate) fn event_json(e: &Event) -> serde_json::Value {
    match e {
        Event::TextDelta(d) => {
            json!({"type": "text_delta", "text": d.text, "reasoning": d.reasoning})
        }
        Event::ToolCallStarted(t) => json!({"type": "tool_call_started", "call_id": t.call_id,
            "tool": t.tool, "plugin": t.plugin, "args": serde_json::from_str::<serde_json::Value>(&t.args_json).unwrap_or_default()}),
        Event::ToolCallFinished(t) => json!({"type": "tool_call_finished", "call_id": t.call_id,
            "tool": t.tool, "plugin": t.plugin, "success": t.success, "content": t.content,
            "error": t.error, "denied_by": t.denied_by, "elapsed_us": t.elapsed_us}),
        Event::ShortCircuit(s) => {
            json!({"type": "short_circuit", "stage": s.stage, "plugin": s.plugin, "text": s.text})
        }
        Event::Interrupted(i) => json!({"type": "interrupted", "source": i.source, "text": i.text}),
        Event::Final(f) => json!({"type": "final", "text": f.text, "token_usage": f.token_usage,
            "iterations": f.iterations, "error": f.error}),
        Event::ConfirmRequest(c) => {
            json!({"type": "confirm_request", "confirm_id": c.confirm_id, "tool": c.tool,
                "args": serde_json::from_str::<serde_json::Value>(&c.args_json).unwrap_or_default(),
                "timeout_ms": c.timeout_ms})
        }
        Event::PluginReply(r) => {
            json!({"type": "plugin_reply", "plugin": r.plugin, "text": r.text, "inline": r.inline})
        }
        Event::Queued(q) => {
            let mut v = json!({"type": "queued", "ahead": q.ahead, "conversation": q.conversation});
            if !q.held_by.is_empty() {
                v["held_by"] = json!(q.held_by);
            }
            v
        }
        Event::ToolCallProgress(p) => json!({"type": "tool_call_progress", "call_id": p.call_id,
            "tool": p.tool, "plugin": p.plugin, "message": p.message, "progress": p.progress,
            "total": p.total}),
    }
}

/// The user's answer to `c`: yes with `--yes`; else asked on the terminal
/// (`/dev/tty`, so it works in the REPL and with piped stdin) within the request's
/// timeout. No terminal, no answer in time, or anything but y/yes is a no.
pub(crate) async fn ask_confirm(c: &ConfirmRequest, yes: bool) -> bool {
    if yes {
        eprintln!("✔ running {} (--yes)", Printer::stderr().line(&c.tool));
        return true;
    }
    // Asked on the terminal: escaped unless --raw.
    let tty = Printer::new(true);
    let question = format!(
        "Run tool {} {}? [y/N] ",
        tty.line(&c.tool),
        tty.line(&c.args_json)
    );
    let ask = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        use std::io::BufRead;
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")?;
        let mut w = tty.try_clone()?;
        w.write_all(question.as_bytes())?;
        w.flush()?;
        let mut line = String::new();
        std::io::BufReader::new(tty).read_line(&mut line)?;
        Ok(line)
    });
    let wait = std::time::Duration::from_millis(u64::from(c.timeout_ms.max(1)));
    match tokio::time::timeout(wait, ask).await {
        Ok(Ok(Ok(line))) => matches!(line.trim().to_lowercase().as_str(), "y" | "yes"),
        Ok(Ok(Err(e))) => {
            eprintln!("✗ {} needs confirmation and there is no terminal to ask ({e}); declined (--yes approves)", Printer::stderr().line(&c.tool));
            false
        }
        _ => {
            eprintln!(
                "\n✗ no answer within {} s; {} not run",
                wait.as_secs(),
                Printer::stderr().line(&c.tool)
            );
            false
        }
    }
}

/// `hearth chat`.
pub async fn chat(
    conn: &mut AdminConn,
    data_dir: &Path,
    args: ChatArgs,
) -> anyhow::Result<ExitCode> {
    if let Some(message) = args.message.clone() {
        let ok = exchange(conn, &args, &message).await?;
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        // A script reads the exit status: any failed turn makes it 1.
        let (mut turns, mut failed) = (0usize, 0usize);
        for line in std::io::stdin().lines() {
            let line = line?;
            if !line.trim().is_empty() {
                turns += 1;
                if !exchange(conn, &args, line.trim()).await? {
                    failed += 1;
                }
            }
        }
        if failed > 0 {
            eprintln!(
                "error: {} of {} failed",
                failed,
                crate::term::count(turns, "turn", "turns")
            );
            return Ok(ExitCode::FAILURE);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let history = data_dir.join("chat_history");
    let mut editor = rustyline::DefaultEditor::new()?;
    let _ = editor.load_history(&history);
    eprintln!("hearth chat — Ctrl-D to quit");
    loop {
        match editor.readline("you> ") {
            Ok(line) => {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line);
                if let Err(e) = exchange(conn, &args, line).await {
                    eprintln!("error: {}", Printer::stderr().line(&e.to_string()));
                }
            }
            Err(rustyline::error::ReadlineError::Interrupted) => continue,
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let _ = editor.save_history(&history);
    Ok(ExitCode::SUCCESS)
}

/// `hearth inject`.
pub async fn inject(conn: &mut AdminConn, args: InjectArgs) -> anyhow::Result<ExitCode> {
    let req = conn.with_token(AgentInjectRequest {
        source: args.source,
        channel: args.channel,
        text: args.text,
        interrupt: args.interrupt,
        no_memory: args.no_memory,
        user_id: args.user,
        group_id: args.group,
        priority: args.priority.map_or(0, PriorityArg::wire),
    });
    let ack = conn
        .agent()
        .inject(req)
        .await
        .map_err(status_error)?
        .into_inner();
    if args.json {
        let v = json!({"conversation": ack.conversation, "ahead": ack.ahead, "interrupted": ack.interrupted});
        println!("{v}");
    } else if ack.interrupted {
        println!(
            "interrupt delivered to the running turn of {}",
            ack.conversation
        );
    } else if args.interrupt {
        println!(
            "no turn of {} was running; interrupt queued first ({} ahead)",
            ack.conversation, ack.ahead
        );
    } else {
        println!("queued in {} ({} ahead)", ack.conversation, ack.ahead);
    }
    Ok(ExitCode::SUCCESS)
}
