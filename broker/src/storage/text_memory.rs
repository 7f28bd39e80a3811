//! TextMemory: the raw chronological log of what was said, as JSONL.
//!
//! One [`TextEvent`] per line, as one JSON object. Each line belongs to the day it was
//! written in the log's time zone ([`TextMemoryOptions::time_zone`]: the broker's local
//! zone, or `[memory] timezone`), so one evening of a user in UTC+8 is one day, and the
//! log only ever grows at its newest day. A change of the zone (or of daylight saving
//! time) never moves a line: a line stays in the day it was written then.
//! [`TextMemory::events_of_day`] reads a day back, in log order, in either mode.
//!
//! # Where the log lives
//! - With SQLite storage (one broker, [`TextMemory::open_with`]): files
//!   `<data_dir>/memory/text/YYYY-MM-DD.jsonl`, named by the line's day, as below.
//! - With PostgreSQL storage (several brokers, [`TextMemory::postgres`]): rows of the
//!   table `text_events`, `line` the same JSON text a file line holds, `day` the day
//!   whose file it would be in (`storage::pg::text_memory`). Brokers sharing a database
//!   share no folder, and a conversation moves between them, so one log in the
//!   database keeps its lines together; appends of several brokers never tear or
//!   interleave within a line as appends to one file over a network file system could.
//!   An append is one transaction, acknowledged after COMMIT; `max_age_days` and
//!   `check_interval` apply (see that module), `max_file_bytes` has no meaning there.
//!
//! # Files
//! One thread owns the open file: appends from any number of tasks are queued to it,
//! written whole (a line never interleaves with another) and fsynced (`fdatasync`)
//! before their callers are answered. Appends that queue up while a sync is running
//! share the next write and sync (group commit), so many concurrent callers cost few
//! fsyncs.
//!
//! # Rotation ([`TextMemoryOptions`])
//! Which file a line goes to is decided in one place, `Writer::file_for`.
//! - By day: a line goes to the file of the day (in the log's time zone) it is written.
//! - By size: a file never grows past `max_file_bytes`. A line that would push it over
//!   starts the day's next file: `YYYY-MM-DD.jsonl`, then `YYYY-MM-DD.1.jsonl`,
//!   `YYYY-MM-DD.2.jsonl` … (a single line longer than the limit gets a file of its
//!   own). The log's order is by day, then by that number; note that a plain sort of
//!   the names puts `.1.jsonl` before `.jsonl` and `.10` before `.2`. A reopened log
//!   appends to the day's highest-numbered file while it has room.
//! - By age: files whose day (read from the name) is more than `max_age_days` before
//!   today are deleted: when the log is opened, whenever a new file is started (a new
//!   day or a size rotation) and every `check_interval` while the writer is idle. Only
//!   files named like the log's own are ever deleted; the file being written never is.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use super::pg::text_memory::PgLog;
use super::{Db, StorageError};

/// Most appends written and synced together.
const MAX_BATCH: usize = 256;

/// Limits of the log files (see the module doc, "Rotation") and the zone their days are
/// in. The broker fills it from the `[memory]` settings; [`Default`] gives 64 MiB, 30
/// days, a check every hour, the system's local time zone. In PostgreSQL mode the age
/// limit, the check interval and the zone apply to the rows; the size limit does not.
#[derive(Debug, Clone, PartialEq)]
pub struct TextMemoryOptions {
    /// Most bytes in one file; a line that would go past it starts the day's next
    /// file. 0 = no size limit (one file per day). Ignored in PostgreSQL mode (no
    /// files).
    pub max_file_bytes: u64,
    /// Files (in PostgreSQL mode: rows) of days more than this many days before today
    /// are deleted. 0 = never delete.
    pub max_age_days: u32,
    /// How often an idle writer looks for files to delete (it also does at open and
    /// at every new file). Zero = only then. In PostgreSQL mode: how often an append
    /// looks for rows to delete (also at open and on a new day).
    pub check_interval: Duration,
    /// The zone whose calendar days name the files (`TimeZone::system()`: the
    /// broker's local zone, from `TZ` or `/etc/localtime`; UTC when it has none).
    pub time_zone: TimeZone,
}

impl Default for TextMemoryOptions {
    fn default() -> Self {
        TextMemoryOptions {
            max_file_bytes: 64 * 1024 * 1024,
            max_age_days: 30,
            check_interval: Duration::from_secs(3600),
            time_zone: TimeZone::system(),
        }
    }
}

/// One line of the log (the seed's `TextEvent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextEvent {
    /// "system", "user" or "assistant".
    pub role: String,
    /// What was said.
    pub content: String,
    /// Unix time in seconds; 0 is replaced by the time of the append.
    pub timestamp: i64,
    /// Source channel; omitted from the line when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub channel: String,
    /// The plugin that injected this message as input (`Input` host service); empty
    /// (and omitted from the line) for anything else.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub injected_by: String,
}

/// Handle to the TextMemory log: files fed by one writer thread, which ends when the
/// last clone is dropped, or rows in PostgreSQL. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TextMemory {
    log: Log,
}

#[derive(Debug, Clone)]
enum Log {
    Files {
        dir: Arc<Path>,
        appends: mpsc::Sender<Append>,
        time_zone: TimeZone,
    },
    Postgres {
        log: Arc<PgLog>,
        time_zone: TimeZone,
    },
}

/// One caller's lines, written in order and answered together.
struct Append {
    lines: Vec<Vec<u8>>,
    done: oneshot::Sender<Result<(), StorageError>>,
}

impl TextMemory {
    /// [`TextMemory::open_with`] the default [`TextMemoryOptions`].
    pub fn open(data_dir: &Path) -> Result<TextMemory, StorageError> {
        TextMemory::open_with(data_dir, TextMemoryOptions::default())
    }

    /// Creates `<data_dir>/memory/text/` if needed, deletes files past
    /// `options.max_age_days` and starts the writer thread. Blocking (a few syscalls):
    /// call it once at startup.
    pub fn open_with(
        data_dir: &Path,
        options: TextMemoryOptions,
    ) -> Result<TextMemory, StorageError> {
        let dir: Arc<Path> = data_dir.join("memory").join("text").into();
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| StorageError::Io { path, op, source }
        };
        std::fs::create_dir_all(&dir).map_err(io("create the TextMemory dir", &dir))?;
        // Make the new directories' entries durable too.
        for parent in [data_dir.join("memory"), data_dir.to_path_buf()] {
            sync_dir(&parent).map_err(io("fsync", &parent))?;
        }
        let (appends, queue) = mpsc::channel();
        let time_zone = options.time_zone.clone();
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            options,
            current: None,
        };
        writer.prune(unix_now());
        std::thread::Builder::new()
            .name("hearth-textmem".into())
            .spawn(move || writer.serve(queue))
            .map_err(io("start the TextMemory thread", &dir))?;
        Ok(TextMemory {
            log: Log::Files {
                dir,
                appends,
                time_zone,
            },
        })
    }

    /// The log in the PostgreSQL database `db` (table `text_events`, see the module
    /// docs), for brokers sharing it; deletes rows past `options.max_age_days` first
    /// (a failure to is logged, as later ones are).
    ///
    /// # Errors
    /// [`StorageError::Invalid`] if `db` is not a PostgreSQL database.
    pub async fn postgres(db: Db, options: TextMemoryOptions) -> Result<TextMemory, StorageError> {
        let Some(pg) = db.pg() else {
            return Err(StorageError::Invalid {
                what: format!("TextMemory in {}", db.path().display()),
                reason: "not a PostgreSQL database (SQLite storage keeps TextMemory in files)"
                    .into(),
            });
        };
        let time_zone = options.time_zone.clone();
        let today = day_in(unix_now(), &time_zone);
        let log = PgLog::open(pg.clone(), options, today).await;
        Ok(TextMemory {
            log: Log::Postgres {
                log: Arc::new(log),
                time_zone,
            },
        })
    }

    /// The log that goes with the broker's storage `db`: files under
    /// `<data_dir>/memory/text/` with SQLite ([`TextMemory::open_with`]), the database
    /// with PostgreSQL ([`TextMemory::postgres`]).
    pub async fn for_db(
        db: &Db,
        data_dir: &Path,
        options: TextMemoryOptions,
    ) -> Result<TextMemory, StorageError> {
        if db.pg().is_some() {
            TextMemory::postgres(db.clone(), options).await
        } else {
            TextMemory::open_with(data_dir, options)
        }
    }

    /// The directory of the `.jsonl` files; `None` in PostgreSQL mode.
    pub fn dir(&self) -> Option<&Path> {
        match &self.log {
            Log::Files { dir, .. } => Some(dir),
            Log::Postgres { .. } => None,
        }
    }

    /// The events of `day` (a calendar day in the log's time zone), in log order:
    /// the day's files in order (`YYYY-MM-DD.jsonl`, then `.1.jsonl`, `.2.jsonl` …),
    /// or the day's rows by id. A line still being written is not returned.
    ///
    /// # Errors
    /// [`StorageError::Io`] (a file could not be read, or holds a line that is not a
    /// [`TextEvent`], naming the file and line) or [`StorageError::Postgres`].
    pub async fn events_of_day(&self, day: Date) -> Result<Vec<TextEvent>, StorageError> {
        match &self.log {
            Log::Files { dir, .. } => {
                let dir = dir.to_path_buf();
                let blocking_dir = dir.clone();
                tokio::task::spawn_blocking(move || read_day(&blocking_dir, day))
                    .await
                    .map_err(|_| StorageError::Closed { path: dir })?
            }
            Log::Postgres { log, .. } => log
                .lines_of_day(day)
                .await?
                .into_iter()
                .map(|(id, line)| {
                    serde_json::from_str(&line).map_err(|e| StorageError::Postgres {
                        target: log.target().to_string(),
                        op: format!("read TextMemory of {day}"),
                        detail: format!("text_events row {id} is not a TextEvent: {e}"),
                    })
                })
                .collect(),
        }
    }

    /// Today in the log's time zone: the day an append now goes to.
    pub fn today(&self) -> Date {
        let tz = match &self.log {
            Log::Files { time_zone, .. } | Log::Postgres { time_zone, .. } => time_zone,
        };
        day_in(unix_now(), tz)
    }

    /// Appends one line for `event` and returns once it is written and fsynced.
    pub async fn append(&self, event: &TextEvent) -> Result<(), StorageError> {
        self.append_all(std::slice::from_ref(event)).await
    }

    /// Appends one line per event, in order, and returns once all are durable. Files:
    /// next to each other, written and fsynced (one write and one sync for all of them,
    /// shared with whatever else is queued); on an error some leading lines may have
    /// been written (to earlier files of a rotation), never a part of a line.
    /// PostgreSQL: one transaction, all lines or none, returned after COMMIT; ids are
    /// handed out per row, so lines other appends (of any broker) insert at the same
    /// moment may fall between them.
    pub async fn append_all(&self, events: &[TextEvent]) -> Result<(), StorageError> {
        if events.is_empty() {
            return Ok(());
        }
        let now = unix_now();
        // serde_json escapes control characters: a line has no newline of its own.
        let lines = events.iter().map(|event| {
            if event.timestamp == 0 {
                let mut stamped = event.clone();
                stamped.timestamp = now;
                serde_json::to_string(&stamped)
            } else {
                serde_json::to_string(event)
            }
            .expect("a TextEvent serializes")
        });
        match &self.log {
            Log::Files { dir, appends, .. } => {
                let lines = lines
                    .map(|line| {
                        let mut line = line.into_bytes();
                        line.push(b'\n');
                        line
                    })
                    .collect();
                let (done, result) = oneshot::channel();
                let closed = || StorageError::Closed {
                    path: dir.to_path_buf(),
                };
                appends.send(Append { lines, done }).map_err(|_| closed())?;
                result.await.map_err(|_| closed())?
            }
            Log::Postgres { log, time_zone } => {
                let lines: Vec<String> = lines.collect();
                log.append(&lines, day_in(now, time_zone)).await
            }
        }
    }
}

/// The events of `day` in the files under `dir`, in log order (see
/// [`TextMemory::events_of_day`]). Blocking.
fn read_day(dir: &Path, day: Date) -> Result<Vec<TextEvent>, StorageError> {
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| StorageError::Io { path, op, source }
    };
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .map_err(io("list the TextMemory dir", dir))?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let (d, seq) = parse_file_name(entry.file_name().to_str()?)?;
            (d == day).then(|| (seq, entry.path()))
        })
        .collect();
    files.sort();
    let mut events = Vec::new();
    for (_, path) in files {
        let text = std::fs::read_to_string(&path).map_err(io("read", &path))?;
        // The last piece has no newline yet: a line being written, not acknowledged.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        for (n, line) in whole.split_terminator('\n').enumerate() {
            let event = serde_json::from_str(line).map_err(|e| StorageError::Io {
                path: path.clone(),
                op: "read a TextMemory line",
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("line {}: not a TextEvent: {e}", n + 1),
                ),
            })?;
            events.push(event);
        }
    }
    Ok(events)
}

/// The file being appended to.
struct OpenFile {
    /// The calendar day (in the log's time zone) the file is for.
    day: Date,
    /// Its number within the day: 0 for `YYYY-MM-DD.jsonl`, N for `YYYY-MM-DD.N.jsonl`.
    seq: u32,
    path: PathBuf,
    file: File,
    /// Length known to be whole lines: a failed write is cut back to it.
    len: u64,
}

/// Owns the log files; runs on the TextMemory thread.
struct Writer {
    dir: PathBuf,
    options: TextMemoryOptions,
    current: Option<OpenFile>,
}

impl Writer {
    fn serve(&mut self, queue: mpsc::Receiver<Append>) {
        loop {
            let first = if self.options.check_interval.is_zero() {
                match queue.recv() {
                    Ok(first) => first,
                    Err(_) => return,
                }
            } else {
                match queue.recv_timeout(self.options.check_interval) {
                    Ok(first) => first,
                    Err(RecvTimeoutError::Timeout) => {
                        self.prune(unix_now());
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            };
            let mut batch = vec![first];
            let mut count = batch[0].lines.len();
            while count < MAX_BATCH {
                match queue.try_recv() {
                    Ok(next) => {
                        count += next.lines.len();
                        batch.push(next);
                    }
                    Err(_) => break,
                }
            }
            let lines: Vec<&[u8]> = batch
                .iter()
                .flat_map(|a| a.lines.iter().map(Vec::as_slice))
                .collect();
            let (written, failed) = match self.write(&lines) {
                Ok(()) => (lines.len(), None),
                Err((written, e)) => {
                    tracing::error!(error = %e, "TextMemory append failed");
                    (written, Some(e))
                }
            };
            // An append succeeded when all of its lines are among the written ones.
            let mut end = 0;
            for append in batch {
                end += append.lines.len();
                let result = match &failed {
                    Some(e) if end > written => Err(copy_error(e)),
                    _ => Ok(()),
                };
                let _ = append.done.send(result);
            }
        }
    }

    /// Appends whole lines, in order, and syncs them: as many as fit in the current
    /// file, then the rest in the next one(s). On failure the file is cut back to its
    /// last whole line (best effort) and reopened next time; the error comes with the
    /// number of lines that were written and synced before it (to earlier files).
    fn write(&mut self, lines: &[&[u8]]) -> Result<(), (usize, StorageError)> {
        let now = unix_now();
        let limit = self.options.max_file_bytes;
        let mut rest = lines;
        while let Some(first) = rest.first() {
            let written = lines.len() - rest.len();
            let open = self
                .file_for(now, first.len() as u64)
                .map_err(|e| (written, e))?;
            // The first line always goes in: `file_for` gave a file it fits in, or an
            // empty one.
            let mut chunk = first.to_vec();
            let mut taken = 1;
            for line in &rest[1..] {
                if limit != 0 && open.len + (chunk.len() + line.len()) as u64 > limit {
                    break;
                }
                chunk.extend_from_slice(line);
                taken += 1;
            }
            rest = &rest[taken..];
            let result = open
                .file
                .write_all(&chunk)
                .and_then(|()| open.file.sync_data());
            match result {
                Ok(()) => open.len += chunk.len() as u64,
                Err(source) => {
                    let _ = open.file.set_len(open.len);
                    let path = open.path.clone();
                    self.current = None;
                    return Err((
                        written,
                        StorageError::Io {
                            path,
                            op: "append and fsync",
                            source,
                        },
                    ));
                }
            }
        }
        Ok(())
    }

    /// The file for a line of `line_len` bytes written at `now` (unix seconds): the
    /// current file if it is today's and the line fits (or it is empty), else today's
    /// next file. Starting a file also deletes expired ones.
    fn file_for(&mut self, now: i64, line_len: u64) -> Result<&mut OpenFile, StorageError> {
        let day = self.day_of(now);
        let limit = self.options.max_file_bytes;
        let fits = |open: &OpenFile| limit == 0 || open.len == 0 || open.len + line_len <= limit;
        let seq = match &self.current {
            Some(open) if open.day == day && fits(open) => {
                return Ok(self.current.as_mut().expect("matched above"));
            }
            // Today's file is full.
            Some(open) if open.day == day => open.seq + 1,
            // A new day, a reopened log or a file dropped after an error: continue the
            // day's highest-numbered file.
            _ => self.last_seq(day),
        };
        self.current = None;
        let mut open = self.open_file(day, seq)?;
        if !fits(&open) {
            open = self.open_file(day, seq + 1)?;
        }
        self.current = Some(open);
        self.prune(now);
        Ok(self.current.as_mut().expect("just set"))
    }

    /// The calendar day of Unix time `now` (seconds) in the log's time zone.
    fn day_of(&self, now: i64) -> Date {
        day_in(now, &self.options.time_zone)
    }

    /// Opens (creating) the file `seq` of `day` for appending.
    fn open_file(&self, day: Date, seq: u32) -> Result<OpenFile, StorageError> {
        let path = self.dir.join(file_name(day, seq));
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| StorageError::Io { path, op, source }
        };
        let existed = path.exists();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("open for append", &path))?;
        if !existed {
            sync_dir(&self.dir).map_err(io("fsync", &self.dir))?;
        }
        let len = file.metadata().map_err(io("stat", &path))?.len();
        Ok(OpenFile {
            day,
            seq,
            path,
            file,
            len,
        })
    }

    /// The highest number among the files of `day` (0 if there are none).
    fn last_seq(&self, day: Date) -> u32 {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        entries
            .filter_map(|e| parse_file_name(e.ok()?.file_name().to_str()?))
            .filter(|&(d, _)| d == day)
            .map(|(_, seq)| seq)
            .max()
            .unwrap_or(0)
    }

    /// Deletes the log files of days more than `max_age_days` before the day of `now`
    /// (never the current file). Failures are logged, not returned: an append never
    /// fails because an old file could not be deleted.
    fn prune(&mut self, now: i64) {
        let max_age = i64::from(self.options.max_age_days);
        if max_age == 0 {
            return;
        }
        let today = self.day_of(now);
        // Files of days before this one are older than `max_age` days.
        let Ok(oldest_kept) = today.checked_sub(max_age.days()) else {
            return;
        };
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), "TextMemory: listing for expiry: {e}");
                return;
            }
        };
        let mut deleted = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some((day, _)) = name.to_str().and_then(parse_file_name) else {
                continue;
            };
            let path = entry.path();
            if day >= oldest_kept || self.current.as_ref().is_some_and(|c| c.path == path) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => deleted += 1,
                Err(e) => {
                    tracing::warn!(file = %path.display(), "TextMemory: deleting expired file: {e}")
                }
            }
        }
        if deleted > 0 {
            tracing::info!(
                dir = %self.dir.display(),
                deleted,
                max_age_days = max_age,
                "TextMemory: deleted expired files"
            );
            if let Err(e) = sync_dir(&self.dir) {
                tracing::warn!(dir = %self.dir.display(), "TextMemory: fsync: {e}");
            }
        }
    }
}

/// The calendar day of Unix time `secs` in `tz`.
fn day_in(secs: i64, tz: &TimeZone) -> Date {
    let at = Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH);
    tz.to_datetime(at).date()
}

/// `YYYY-MM-DD.jsonl` for file 0 of a day, `YYYY-MM-DD.N.jsonl` for file N.
fn file_name(day: Date, seq: u32) -> String {
    let date = day.strftime("%Y-%m-%d");
    if seq == 0 {
        format!("{date}.jsonl")
    } else {
        format!("{date}.{seq}.jsonl")
    }
}

/// The log files in `dir`, in log order (day, then number), each with its day; an
/// empty list when `dir` does not exist. For `hearth storage migrate`.
pub(crate) fn log_files(dir: &Path) -> io::Result<Vec<(Date, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        if let Some((day, n)) = entry.file_name().to_str().and_then(parse_file_name) {
            files.push((day, n, entry.path()));
        }
    }
    files.sort_by_key(|f| (f.0, f.1));
    Ok(files
        .into_iter()
        .map(|(day, _, path)| (day, path))
        .collect())
}

/// (day, number) of a log file's name, `None` for any other name (an invalid date
/// included), so no other file is ever taken for a log file.
fn parse_file_name(name: &str) -> Option<(Date, u32)> {
    let stem = name.strip_suffix(".jsonl")?;
    let (date, seq) = match stem.split_once('.') {
        None => (stem, 0),
        Some((date, seq)) => {
            if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) || seq.starts_with('0') {
                return None;
            }
            (date, seq.parse().ok()?)
        }
    };
    let bytes = date.as_bytes();
    let digits = |r: std::ops::Range<usize>| bytes[r].iter().all(u8::is_ascii_digit);
    if bytes.len() != 10
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !(digits(0..4) && digits(5..7) && digits(8..10))
    {
        return None;
    }
    // jiff refuses dates that do not exist (2026-02-30).
    let day: Date = date.parse().ok()?;
    Some((day, seq))
}

/// One batch's error, repeated for each of its callers.
fn copy_error(e: &StorageError) -> StorageError {
    match e {
        StorageError::Io { path, op, source } => StorageError::Io {
            path: path.clone(),
            op,
            source: io::Error::new(source.kind(), source.to_string()),
        },
        other => StorageError::Io {
            path: PathBuf::new(),
            op: "append",
            source: io::Error::other(other.to_string()),
        },
    }
}

/// Makes a directory's entries (a created file or subdirectory) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::storage::test_db::{on_both_backends, TestDb};

    on_both_backends!(
        appended_events_read_back_by_day_as_the_lines_written,
        expired_days_are_deleted_at_open_and_after_the_check_interval,
        concurrent_appends_never_interleave,
    );

    /// The log that goes with `t`'s storage: files in its data dir (SQLite) or rows in
    /// its database (PostgreSQL).
    async fn open_log(t: &TestDb, options: TextMemoryOptions) -> TextMemory {
        let db = t.open().await;
        // SQLite: `<data_dir>/hearth.db`; PostgreSQL ignores the dir.
        let data_dir = db.path().parent().unwrap_or(Path::new(".")).to_path_buf();
        TextMemory::for_db(&db, &data_dir, options).await.unwrap()
    }

    /// The raw lines of `day`, in log order: what the files hold, or the rows' `line`.
    async fn raw_lines(memory: &TextMemory, day: Date) -> Vec<String> {
        match &memory.log {
            Log::Files { dir, .. } => {
                let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
                    .unwrap()
                    .filter_map(|e| {
                        let e = e.unwrap();
                        let (d, seq) = parse_file_name(e.file_name().to_str()?)?;
                        (d == day).then(|| (seq, e.path()))
                    })
                    .collect();
                files.sort();
                files
                    .iter()
                    .flat_map(|(_, f)| {
                        let text = std::fs::read_to_string(f).unwrap();
                        assert!(text.ends_with('\n'), "{} ends mid-line", f.display());
                        text.lines().map(String::from).collect::<Vec<_>>()
                    })
                    .collect()
            }
            Log::Postgres { log, .. } => log
                .lines_of_day(day)
                .await
                .unwrap()
                .into_iter()
                .map(|(_, line)| line)
                .collect(),
        }
    }

    /// Puts an event with `content` into the log's `day` behind its back (a day the
    /// log itself never writes to: days only ever come from the clock).
    async fn plant(memory: &TextMemory, day: Date, content: &str) {
        let line = serde_json::to_string(&event(content, 1)).unwrap();
        match &memory.log {
            Log::Files { dir, .. } => {
                std::fs::write(dir.join(file_name(day, 0)), line + "\n").unwrap()
            }
            Log::Postgres { log, .. } => {
                let client = log.pg().client("plant").await.unwrap();
                client
                    .execute(
                        "INSERT INTO text_events (day, line) VALUES (($1::text)::date, $2)",
                        &[&day.to_string(), &line],
                    )
                    .await
                    .unwrap();
            }
        }
    }

    async fn appended_events_read_back_by_day_as_the_lines_written(t: TestDb) {
        let memory = open_log(&t, TextMemoryOptions::default()).await;
        let first = event("多行\n内容 \"quoted\" 🌧", 1_795_996_800);
        let stamped_later = TextEvent {
            role: "assistant".into(),
            content: "ok".into(),
            timestamp: 0,
            channel: String::new(),
            injected_by: "timer".into(),
        };
        memory.append(&first).await.unwrap();
        let before = unix_now();
        memory
            .append_all(&[stamped_later.clone(), event("third", 7)])
            .await
            .unwrap();
        let after = unix_now();
        memory.append_all(&[]).await.unwrap();

        // Readable as soon as the append returned.
        let today = memory.today();
        let events = memory.events_of_day(today).await.unwrap();
        assert_eq!(events.len(), 3, "{events:?}");
        assert_eq!(events[0], first);
        // Timestamp 0 is stamped with the time of the append.
        assert!(
            (before..=after).contains(&events[1].timestamp),
            "{events:?}"
        );
        assert_eq!(
            events[1],
            TextEvent {
                timestamp: events[1].timestamp,
                ..stamped_later
            }
        );
        assert_eq!(events[2], event("third", 7));
        // The lines are the JSON of the events; an empty channel is left out.
        let lines = raw_lines(&memory, today).await;
        let expected: Vec<String> = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        assert_eq!(lines, expected);
        assert!(!lines[1].contains("channel"), "{}", lines[1]);
        // Other days hold nothing.
        for other in [today.yesterday().unwrap(), today.tomorrow().unwrap()] {
            assert_eq!(memory.events_of_day(other).await.unwrap(), []);
        }

        // Another handle (a restarted broker, or another one) reads the same log and
        // appends after what is there.
        let other = open_log(&t, TextMemoryOptions::default()).await;
        other.append(&event("fourth", 8)).await.unwrap();
        let contents: Vec<String> = memory
            .events_of_day(today)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.content)
            .collect();
        assert_eq!(contents, [first.content.as_str(), "ok", "third", "fourth"]);
    }

    async fn expired_days_are_deleted_at_open_and_after_the_check_interval(t: TestDb) {
        let options = |max_age_days, check_interval| TextMemoryOptions {
            max_file_bytes: 0,
            max_age_days,
            check_interval,
            time_zone: TimeZone::system(),
        };
        let memory = open_log(&t, options(0, Duration::ZERO)).await;
        let today = memory.today();
        let ago = |days: i64| today.checked_sub(days.days()).unwrap();
        for days in [400, 31, 30, 1] {
            plant(&memory, ago(days), &format!("{days} days ago")).await;
        }
        drop(memory);

        // At open: days more than 30 days before today go.
        let memory = open_log(&t, options(30, Duration::ZERO)).await;
        for (days, kept) in [(400, false), (31, false), (30, true), (1, true)] {
            let events = memory.events_of_day(ago(days)).await.unwrap();
            assert_eq!(events.len(), usize::from(kept), "{days} days ago");
        }
        drop(memory);

        // While in use: at the latest at the first append after `check_interval`.
        let memory = open_log(&t, options(2, Duration::from_millis(20))).await;
        memory.append(&event("today", 1)).await.unwrap();
        plant(&memory, ago(3), "expired").await;
        plant(&memory, ago(2), "kept").await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !memory.events_of_day(ago(3)).await.unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "never deleted");
            tokio::time::sleep(Duration::from_millis(30)).await;
            memory.append(&event("later", 1)).await.unwrap();
        }
        assert_eq!(memory.events_of_day(ago(2)).await.unwrap().len(), 1);
        assert_eq!(
            memory.events_of_day(ago(1)).await.unwrap(),
            [event("1 days ago", 1)]
        );
        assert_eq!(
            memory.events_of_day(today).await.unwrap()[0].content,
            "today"
        );
    }

    /// Two brokers (two pools) appending to one PostgreSQL log at once: every line is
    /// in the day, whole, and each writer's lines in its own order.
    #[tokio::test]
    async fn brokers_append_to_one_postgres_log() {
        let Some(t) = TestDb::postgres() else {
            return;
        };
        let brokers = [
            open_log(&t, TextMemoryOptions::default()).await,
            open_log(&t, TextMemoryOptions::default()).await,
        ];
        assert!(brokers.iter().all(|b| b.dir().is_none()));
        const EACH: usize = 30;
        let writer = |memory: TextMemory, name: String| async move {
            for i in 0..EACH {
                let batch = [
                    event(&format!("{name} {i} a"), 1),
                    event(&format!("{name} {i} b"), 1),
                ];
                memory.append_all(&batch).await.unwrap();
            }
        };
        tokio::join!(
            writer(brokers[0].clone(), "x".into()),
            writer(brokers[0].clone(), "y".into()),
            writer(brokers[1].clone(), "z".into()),
        );
        let events = brokers[1].events_of_day(brokers[1].today()).await.unwrap();
        assert_eq!(events.len(), 3 * EACH * 2);
        for name in ["x", "y", "z"] {
            let mine: Vec<&str> = events
                .iter()
                .filter_map(|e| e.content.strip_prefix(&format!("{name} ")))
                .collect();
            let expected: Vec<String> = (0..EACH)
                .flat_map(|i| [format!("{i} a"), format!("{i} b")])
                .collect();
            assert_eq!(mine, expected, "{name}");
        }
    }

    /// PostgreSQL mode needs a PostgreSQL database.
    #[tokio::test]
    async fn postgres_mode_refuses_sqlite_storage() {
        let t = TestDb::sqlite();
        let err = TextMemory::postgres(t.open().await, TextMemoryOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::Invalid { .. }), "{err:?}");
        assert!(
            err.to_string().contains("not a PostgreSQL database"),
            "{err}"
        );
    }

    /// A line being written (no newline yet) is not read; a line that is not an event
    /// is an error naming the file and line.
    #[tokio::test]
    async fn reading_files_skips_a_partial_line_and_names_a_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let memory = TextMemory::open(dir.path()).unwrap();
        memory.append(&event("whole", 1)).await.unwrap();
        let day = date(2020, 1, 2);
        let whole = serde_json::to_string(&event("old", 1)).unwrap();
        let file = memory.dir().unwrap().join(file_name(day, 0));
        std::fs::write(&file, format!("{whole}\n{{\"role\":\"us")).unwrap();
        std::fs::write(
            memory.dir().unwrap().join(file_name(day, 1)),
            format!("{whole}\n"),
        )
        .unwrap();
        let events = memory.events_of_day(day).await.unwrap();
        assert_eq!(events, [event("old", 1), event("old", 1)]);
        std::fs::write(&file, format!("{whole}\nnot json\n")).unwrap();
        let err = memory.events_of_day(day).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("2020-01-02.jsonl") && text.contains("line 2"),
            "{text}"
        );
    }

    fn event(content: &str, timestamp: i64) -> TextEvent {
        TextEvent {
            role: "user".into(),
            content: content.into(),
            timestamp,
            channel: "qq".into(),
            injected_by: String::new(),
        }
    }

    /// The log files of `dir` in log order (day, then number).
    fn log_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort_by_key(|f| {
            parse_file_name(f.file_name().unwrap().to_str().unwrap())
                .unwrap_or_else(|| panic!("{} is not a log file", f.display()))
        });
        files
    }

    /// Every line of every `.jsonl` file, in log order, parsed; panics on a line that
    /// is not a whole event.
    fn read_all(dir: &Path) -> Vec<TextEvent> {
        let mut events = Vec::new();
        for file in log_files(dir) {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(text.ends_with('\n'), "{} ends mid-line", file.display());
            for line in text.lines() {
                events.push(serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")));
            }
        }
        events
    }

    #[test]
    fn days_are_the_calendar_days_of_the_log_time_zone() {
        let tz = |name: &str| TimeZone::get(name).unwrap();
        // 2026-12-01 15:30 UTC is 23:30 in Shanghai; an hour later it is the 2nd there.
        let evening = 1_796_139_000;
        assert_eq!(day_in(evening, &tz("Asia/Shanghai")), date(2026, 12, 1));
        assert_eq!(
            day_in(evening + 3600, &tz("Asia/Shanghai")),
            date(2026, 12, 2)
        );
        assert_eq!(day_in(evening + 3600, &TimeZone::UTC), date(2026, 12, 1));
        // West of UTC the day starts later.
        assert_eq!(
            day_in(1_796_169_600 + 3600, &tz("America/New_York")),
            date(2026, 12, 1)
        );
        assert_eq!(day_in(0, &TimeZone::UTC), date(1970, 1, 1));
    }

    fn date(y: i16, m: i8, d: i8) -> Date {
        Date::new(y, m, d).unwrap()
    }

    #[test]
    fn log_file_names() {
        let day = date(2026, 11, 30);
        assert_eq!(file_name(day, 0), "2026-11-30.jsonl");
        assert_eq!(file_name(day, 12), "2026-11-30.12.jsonl");
        assert_eq!(parse_file_name("2026-11-30.jsonl"), Some((day, 0)));
        assert_eq!(parse_file_name("2026-11-30.12.jsonl"), Some((day, 12)));
        assert_eq!(
            parse_file_name("2000-02-29.jsonl"),
            Some((date(2000, 2, 29), 0))
        );
        for other in [
            "2026-11-30.json",
            "2026-11-30.0.jsonl",
            "2026-11-30..jsonl",
            "2026-11-30.x.jsonl",
            "2026-11-30.01.jsonl",
            "2026-13-01.jsonl",
            "2026-02-30.jsonl",
            "2026-1-30.jsonl",
            "notes.jsonl",
            "+026-11-30.jsonl",
            ".jsonl",
        ] {
            assert_eq!(parse_file_name(other), None, "{other}");
        }
    }

    fn today() -> Date {
        day_in(unix_now(), &TimeZone::system())
    }

    fn options(max_file_bytes: u64, max_age_days: u32) -> TextMemoryOptions {
        TextMemoryOptions {
            max_file_bytes,
            max_age_days,
            check_interval: Duration::ZERO,
            time_zone: TimeZone::system(),
        }
    }

    #[tokio::test]
    async fn files_rotate_by_size_and_never_exceed_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let memory = TextMemory::open_with(dir.path(), options(300, 30)).unwrap();
        let mut sent = Vec::new();
        for i in 0..20 {
            let e = event(
                &format!("line {i} {}", "x".repeat(i * 3)),
                1_700_000_000 + i as i64,
            );
            memory.append(&e).await.unwrap();
            sent.push(e);
        }
        // One line longer than the limit gets a file of its own.
        let long = event(&"长".repeat(200), 1_700_000_100);
        memory.append(&long).await.unwrap();
        sent.push(long);
        memory
            .append(&event("after the long one", 1))
            .await
            .unwrap();
        sent.push(event("after the long one", 1));

        let files = log_files(memory.dir().unwrap());
        assert!(files.len() >= 5, "{files:?}");
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        let base = file_name(today(), 0);
        assert_eq!(names[0], base);
        for (i, name) in names.iter().enumerate().skip(1) {
            assert_eq!(name, &file_name(today(), i as u32), "{names:?}");
        }
        let sizes: Vec<u64> = files.iter().map(|f| f.metadata().unwrap().len()).collect();
        let over: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] > 300).collect();
        assert_eq!(
            over.len(),
            1,
            "only the long line's file is over: {sizes:?}"
        );
        let long_file = std::fs::read_to_string(&files[over[0]]).unwrap();
        assert_eq!(long_file.lines().count(), 1);
        // Each file was full when the next began: its next line would not have fitted.
        for (i, next) in files.iter().enumerate().skip(1) {
            let text = std::fs::read_to_string(next).unwrap();
            let first_line = text.split_inclusive('\n').next().unwrap();
            assert!(sizes[i - 1] + first_line.len() as u64 > 300, "{sizes:?}");
        }
        assert_eq!(read_all(memory.dir().unwrap()), sent);

        // A reopened log goes on in the last file while it has room.
        drop(memory);
        let last = files.last().unwrap().clone();
        let before = last.metadata().unwrap().len();
        let memory = TextMemory::open_with(dir.path(), options(300, 30)).unwrap();
        memory.append(&event("reopened", 2)).await.unwrap();
        assert_eq!(log_files(memory.dir().unwrap()).len(), files.len());
        assert!(last.metadata().unwrap().len() > before);
        assert_eq!(
            read_all(memory.dir().unwrap()).last().unwrap().content,
            "reopened"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_rotate_without_losing_or_splitting_lines() {
        let dir = tempfile::tempdir().unwrap();
        let memory = TextMemory::open_with(dir.path(), options(1_000, 30)).unwrap();
        let mut tasks = Vec::new();
        for t in 0..8 {
            let memory = memory.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    let body = format!("task {t} line {i} ") + &"字".repeat(20 + i);
                    memory.append(&event(&body, 1_700_000_000)).await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let files = log_files(memory.dir().unwrap());
        assert!(files.len() > 10, "{}", files.len());
        for f in &files {
            assert!(f.metadata().unwrap().len() <= 1_000, "{}", f.display());
        }
        let events = read_all(memory.dir().unwrap());
        assert_eq!(events.len(), 8 * 25);
        for t in 0..8 {
            let mine: Vec<usize> = events
                .iter()
                .filter_map(|e| {
                    let rest = e.content.strip_prefix(&format!("task {t} line "))?;
                    rest.split(' ').next()?.parse().ok()
                })
                .collect();
            assert_eq!(mine, (0..25).collect::<Vec<_>>(), "task {t}");
        }
    }

    /// Writes an old log file by its name's date (a day `days_ago` before today).
    fn old_file(dir: &Path, days_ago: i64, seq: u32) -> PathBuf {
        let path = dir.join(file_name(
            today().checked_sub(days_ago.days()).unwrap(),
            seq,
        ));
        std::fs::write(
            &path,
            "{\"role\":\"user\",\"content\":\"old\",\"timestamp\":1}\n",
        )
        .unwrap();
        path
    }

    #[tokio::test]
    async fn old_files_are_deleted_at_open_and_at_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let text_dir = dir.path().join("memory/text");
        std::fs::create_dir_all(&text_dir).unwrap();
        let expired = [
            old_file(&text_dir, 400, 0),
            old_file(&text_dir, 31, 0),
            old_file(&text_dir, 31, 2),
        ];
        let kept = [
            old_file(&text_dir, 30, 0),
            old_file(&text_dir, 1, 0),
            old_file(&text_dir, 1, 1),
            // Not the log's own: never touched.
            text_dir.join("notes.txt"),
            text_dir.join("1999-02-30.jsonl"),
            text_dir.join("1999-01-01.jsonl.bak"),
        ];
        for other in &kept[3..] {
            std::fs::write(other, "mine").unwrap();
        }

        let memory = TextMemory::open_with(dir.path(), options(200, 30)).unwrap();
        for path in &expired {
            assert!(!path.exists(), "{} survived open", path.display());
        }
        for path in &kept {
            assert!(path.exists(), "{} was deleted", path.display());
        }

        // Expired while open (here: dropped in by hand): deleted when a file is
        // started, i.e. at the first append of the run and at each size rotation.
        memory.append(&event("first", 1)).await.unwrap();
        let late = old_file(&text_dir, 45, 0);
        memory.append(&event("second", 1)).await.unwrap();
        assert!(late.exists(), "no new file yet, no check");
        while log_files_today(&text_dir) < 2 {
            memory.append(&event(&"more ".repeat(10), 1)).await.unwrap();
        }
        assert!(!late.exists(), "deleted at the size rotation");
        for path in &kept {
            assert!(path.exists(), "{} was deleted", path.display());
        }
    }

    fn log_files_today(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| parse_file_name(e.unwrap().file_name().to_str()?))
            .filter(|&(day, _)| day == today())
            .count()
    }

    #[tokio::test]
    async fn an_idle_writer_deletes_expired_files_periodically() {
        let dir = tempfile::tempdir().unwrap();
        let memory = TextMemory::open_with(
            dir.path(),
            TextMemoryOptions {
                max_file_bytes: 0,
                max_age_days: 2,
                check_interval: Duration::from_millis(20),
                time_zone: TimeZone::system(),
            },
        )
        .unwrap();
        memory.append(&event("today", 1)).await.unwrap();
        let expired = old_file(memory.dir().unwrap(), 3, 0);
        let kept = old_file(memory.dir().unwrap(), 2, 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while expired.exists() {
            assert!(std::time::Instant::now() < deadline, "never deleted");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(kept.exists());
        assert_eq!(
            read_all(memory.dir().unwrap()).len(),
            2,
            "today's and the kept file"
        );
    }

    #[tokio::test]
    async fn zero_limits_mean_no_limit() {
        let dir = tempfile::tempdir().unwrap();
        let text_dir = dir.path().join("memory/text");
        std::fs::create_dir_all(&text_dir).unwrap();
        let ancient = old_file(&text_dir, 10_000, 0);
        let memory = TextMemory::open_with(dir.path(), options(0, 0)).unwrap();
        for i in 0..50 {
            memory.append(&event(&"y".repeat(i * 10), 1)).await.unwrap();
        }
        assert!(ancient.exists());
        assert_eq!(log_files_today(memory.dir().unwrap()), 1);
        assert_eq!(TextMemoryOptions::default().max_file_bytes, 64 << 20);
        assert_eq!(TextMemoryOptions::default().max_age_days, 30);
    }

    #[tokio::test]
    async fn files_are_named_by_the_day_in_the_configured_zone() {
        // A zone where it is another day than in UTC for half of every day: one of the
        // two is today's date there, and the file must carry that one.
        for zone in ["Pacific/Kiritimati", "Pacific/Pago_Pago"] {
            let dir = tempfile::tempdir().unwrap();
            let tz = TimeZone::get(zone).unwrap();
            let mut o = options(0, 0);
            o.time_zone = tz.clone();
            let memory = TextMemory::open_with(dir.path(), o).unwrap();
            let before = day_in(unix_now(), &tz);
            memory.append(&event("hi", 1)).await.unwrap();
            let after = day_in(unix_now(), &tz);
            let name = log_files(memory.dir().unwrap())[0]
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            assert!(
                name == file_name(before, 0) || name == file_name(after, 0),
                "{zone}: {name}"
            );
        }
    }

    #[tokio::test]
    async fn appends_one_json_line_per_event_in_todays_file() {
        let dir = tempfile::tempdir().unwrap();
        let memory = TextMemory::open(dir.path()).unwrap();
        assert_eq!(memory.dir(), Some(dir.path().join("memory/text").as_path()));
        let first = event("多行\n内容 \"quoted\" 🌧", 1_795_996_800);
        let second = TextEvent {
            role: "assistant".into(),
            content: "ok".into(),
            timestamp: 0,
            channel: String::new(),
            injected_by: String::new(),
        };
        memory.append(&first).await.unwrap();
        let before = unix_now();
        memory.append(&second).await.unwrap();

        // Visible as soon as append returned: it was written (and synced) by then.
        let file = memory.dir().unwrap().join(file_name(today(), 0));
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(serde_json::from_str::<TextEvent>(lines[0]).unwrap(), first);
        // Empty channel omitted; timestamp 0 stamped with the time of the append.
        let stamped: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert!(stamped.get("channel").is_none(), "{stamped}");
        assert!(stamped["timestamp"].as_i64().unwrap() >= before);

        // A reopened log appends after what is there.
        drop(memory);
        let memory = TextMemory::open(dir.path()).unwrap();
        memory.append(&event("third", 1)).await.unwrap();
        let contents: Vec<String> = read_all(memory.dir().unwrap())
            .into_iter()
            .map(|e| e.content)
            .collect();
        assert_eq!(contents, [first.content.as_str(), "ok", "third"]);
    }

    async fn concurrent_appends_never_interleave(t: TestDb) {
        let memory = open_log(&t, TextMemoryOptions::default()).await;
        const TASKS: usize = 32;
        const EACH: usize = 25;
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let memory = memory.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..EACH {
                    // Long lines (well over a pipe/page buffer) make torn writes visible.
                    let body = format!("task {t} line {i} ") + &"数据".repeat(3_000 + t * 10);
                    memory
                        .append(&event(&body, 1_700_000_000 + i as i64))
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let events = memory.events_of_day(memory.today()).await.unwrap();
        assert_eq!(events.len(), TASKS * EACH);
        // Each task's lines are whole and in its own order.
        let mut next: HashMap<usize, usize> = HashMap::new();
        for e in events {
            let mut words = e.content.split(' ');
            assert_eq!(words.next(), Some("task"));
            let t: usize = words.next().unwrap().parse().unwrap();
            assert_eq!(words.next(), Some("line"));
            let i: usize = words.next().unwrap().parse().unwrap();
            assert_eq!(words.next().unwrap(), "数据".repeat(3_000 + t * 10));
            let expected = next.entry(t).or_default();
            assert_eq!(i, *expected, "task {t} out of order");
            *expected += 1;
        }
        assert!(next.values().all(|&n| n == EACH));
    }
}
