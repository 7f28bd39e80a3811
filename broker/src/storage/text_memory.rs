//! TextMemory: the raw chronological log of what was said, as JSONL.
//!
//! One [`TextEvent`] per line in `<data_dir>/memory/text/YYYY-MM-DD.jsonl`, named by
//! the UTC day the line was written (so the log only ever grows at its newest file).
//! One thread owns the open file: appends from any number of tasks are queued to it,
//! written whole (a line never interleaves with another) and fsynced (`fdatasync`)
//! before their callers are answered. Appends that queue up while a sync is running
//! share the next write and sync (group commit), so many concurrent callers cost few
//! fsyncs.
//!
//! Which file a line goes to is decided in one place, `Writer::file_for`; size and age
//! rotation hook in there.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::StorageError;

/// Most appends written and synced together.
const MAX_BATCH: usize = 256;

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
}

/// Handle to the TextMemory log. Cheap to clone; all clones feed one writer thread,
/// which ends when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct TextMemory {
    dir: Arc<Path>,
    appends: mpsc::Sender<Append>,
}

struct Append {
    line: Vec<u8>,
    done: oneshot::Sender<Result<(), StorageError>>,
}

impl TextMemory {
    /// Creates `<data_dir>/memory/text/` if needed and starts the writer thread.
    /// Blocking (a few syscalls): call it once at startup.
    pub fn open(data_dir: &Path) -> Result<TextMemory, StorageError> {
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
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            current: None,
        };
        std::thread::Builder::new()
            .name("hearth-textmem".into())
            .spawn(move || writer.serve(queue))
            .map_err(io("start the TextMemory thread", &dir))?;
        Ok(TextMemory { dir, appends })
    }

    /// The directory of the `.jsonl` files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one line for `event` and returns once it is written and fsynced.
    pub async fn append(&self, event: &TextEvent) -> Result<(), StorageError> {
        let mut line = if event.timestamp == 0 {
            let mut stamped = event.clone();
            stamped.timestamp = unix_now();
            serde_json::to_vec(&stamped)
        } else {
            serde_json::to_vec(event)
        }
        .expect("a TextEvent serializes");
        // serde_json escapes control characters, so the line has no newline of its own.
        line.push(b'\n');
        let (done, result) = oneshot::channel();
        let closed = || StorageError::Closed {
            path: self.dir.to_path_buf(),
        };
        self.appends
            .send(Append { line, done })
            .map_err(|_| closed())?;
        result.await.map_err(|_| closed())?
    }
}

/// The file being appended to.
struct OpenFile {
    /// Days since 1970-01-01 (UTC) the file is for.
    day: i64,
    path: PathBuf,
    file: File,
    /// Length known to be whole lines: a failed write is cut back to it.
    len: u64,
}

/// Owns the log files; runs on the TextMemory thread.
struct Writer {
    dir: PathBuf,
    current: Option<OpenFile>,
}

impl Writer {
    fn serve(&mut self, queue: mpsc::Receiver<Append>) {
        while let Ok(first) = queue.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            let bytes: Vec<u8> = batch.iter().flat_map(|a| a.line.iter().copied()).collect();
            match self.write(&bytes) {
                Ok(()) => {
                    for append in batch {
                        let _ = append.done.send(Ok(()));
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "TextMemory append failed");
                    for append in batch {
                        let _ = append.done.send(Err(copy_error(&e)));
                    }
                }
            }
        }
    }

    /// Appends whole lines and syncs them. On failure the file is cut back to its last
    /// whole line (best effort) and reopened next time.
    fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        let now = unix_now();
        let open = self.file_for(now)?;
        let result = open
            .file
            .write_all(bytes)
            .and_then(|()| open.file.sync_data());
        match result {
            Ok(()) => {
                open.len += bytes.len() as u64;
                Ok(())
            }
            Err(source) => {
                let _ = open.file.set_len(open.len);
                let path = open.path.clone();
                self.current = None;
                Err(StorageError::Io {
                    path,
                    op: "append and fsync",
                    source,
                })
            }
        }
    }

    /// The file for a line written at `now` (unix seconds): today's (UTC) day file.
    /// Size and age rotation belong here.
    fn file_for(&mut self, now: i64) -> Result<&mut OpenFile, StorageError> {
        let day = now.div_euclid(86_400);
        if self.current.as_ref().is_some_and(|open| open.day == day) {
            return Ok(self.current.as_mut().expect("checked above"));
        }
        self.current = None;
        let (y, m, d) = civil_from_days(day);
        let path = self.dir.join(format!("{y:04}-{m:02}-{d:02}.jsonl"));
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
        Ok(self.current.insert(OpenFile {
            day,
            path,
            file,
            len,
        }))
    }
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

/// (year, month, day) of a count of days since 1970-01-01, proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn event(content: &str, timestamp: i64) -> TextEvent {
        TextEvent {
            role: "user".into(),
            content: content.into(),
            timestamp,
            channel: "qq".into(),
        }
    }

    /// Every line of every `.jsonl` file, parsed; panics on a line that is not a whole
    /// event.
    fn read_all(dir: &Path) -> Vec<TextEvent> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let mut events = Vec::new();
        for file in files {
            assert_eq!(file.extension().unwrap(), "jsonl");
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(text.ends_with('\n'), "{} ends mid-line", file.display());
            for line in text.lines() {
                events.push(serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")));
            }
        }
        events
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(1_795_996_800 / 86_400), (2026, 11, 30));
    }

    #[tokio::test]
    async fn appends_one_json_line_per_event_in_todays_file() {
        let dir = tempfile::tempdir().unwrap();
        let memory = TextMemory::open(dir.path()).unwrap();
        assert_eq!(memory.dir(), dir.path().join("memory/text"));
        let first = event("多行\n内容 \"quoted\" 🌧", 1_795_996_800);
        let second = TextEvent {
            role: "assistant".into(),
            content: "ok".into(),
            timestamp: 0,
            channel: String::new(),
        };
        memory.append(&first).await.unwrap();
        let before = unix_now();
        memory.append(&second).await.unwrap();

        // Visible as soon as append returned: it was written (and synced) by then.
        let (y, m, d) = civil_from_days(unix_now().div_euclid(86_400));
        let file = memory.dir().join(format!("{y:04}-{m:02}-{d:02}.jsonl"));
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
        let contents: Vec<String> = read_all(memory.dir())
            .into_iter()
            .map(|e| e.content)
            .collect();
        assert_eq!(contents, [first.content.as_str(), "ok", "third"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let memory = TextMemory::open(dir.path()).unwrap();
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
        let events = read_all(memory.dir());
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
