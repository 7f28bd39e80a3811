//! Memory in the pipeline: before `pre_action`, what the stores know about the message
//! is added to the context (`StageContext.memory`, and one system message the LLM
//! reads), unless the input is `no_memory` (seed: StageContext `Memory []MemItem`).
//!
//! - graph memory: entities whose names contain the message's keywords
//!   ([`crate::storage::keywords`]) and the relations up to two steps around them; a
//!   relation touching a matched entity scores 1.0, one a step further 0.5 (role
//!   `memory`);
//! - DocMemory and Knowledge: the best documents and entries for the message, with
//!   their search scores (roles `document`, `knowledge`). The knowledge folder is
//!   re-read for recall when files were added, removed or renamed, else at most once
//!   a second (an entry edited in place is recalled at most a second later).
//!
//! A store that fails is logged and skipped; recall never fails a turn.

use hearth_proto::v1::MemItem;

use crate::storage::{keywords, DocMemory, GraphMemory, Knowledge};

/// Most keywords recalled by.
const MAX_KEYWORDS: usize = 16;
/// Most graph relations added.
const MAX_RELATIONS: usize = 20;
/// Most characters of one document or entry added.
const MAX_DOC_CHARS: usize = 1000;
/// Unless files were added, removed or renamed, the knowledge folder is re-read for
/// recall at most this often (an entry edited in place is recalled at most this much
/// later; `Knowledge.Search` always re-reads it).
const RECALL_SYNC_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// The stores a turn recalls from.
#[derive(Debug, Clone)]
pub struct MemorySources {
    /// Graph memory.
    pub graph: GraphMemory,
    /// Document memory.
    pub docs: DocMemory,
    /// The knowledge folder.
    pub knowledge: Knowledge,
    /// Documents and knowledge entries added, each (0 = none).
    pub top_k: u32,
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_DOC_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

impl MemorySources {
    /// Memory items for `text`: graph relations first, then documents, then
    /// knowledge, each group best first.
    pub async fn recall(&self, text: &str) -> Vec<MemItem> {
        let mut items = Vec::new();
        let words = keywords(text, MAX_KEYWORDS);
        if !words.is_empty() {
            match self.graph.recall(&words, 2).await {
                Ok(g) => {
                    let matched = |name: &str| {
                        let name = name.to_lowercase();
                        words.iter().any(|w| name.contains(w.as_str()))
                    };
                    let mut rels: Vec<MemItem> = g
                        .relations
                        .iter()
                        .map(|r| MemItem {
                            role: "memory".into(),
                            content: format!(
                                "{} {} {}",
                                r.source_name, r.relation_type, r.target_name
                            ),
                            score: if matched(&r.source_name) || matched(&r.target_name) {
                                1.0
                            } else {
                                0.5
                            },
                        })
                        .collect();
                    rels.sort_by(|a, b| b.score.total_cmp(&a.score));
                    rels.truncate(MAX_RELATIONS);
                    items.extend(rels);
                }
                Err(e) => tracing::warn!("memory: graph recall failed: {e}"),
            }
        }
        if self.top_k == 0 {
            return items;
        }
        match self.docs.query(text, self.top_k).await {
            Ok(docs) => items.extend(docs.into_iter().map(|d| MemItem {
                role: "document".into(),
                content: if d.title.is_empty() {
                    clip(&d.content)
                } else {
                    format!("{}: {}", d.title, clip(&d.content))
                },
                score: d.score,
            })),
            Err(e) => tracing::warn!("memory: document query failed: {e}"),
        }
        match self
            .knowledge
            .search_synced_within(text, self.top_k, RECALL_SYNC_AGE)
            .await
        {
            Ok(found) => items.extend(found.into_iter().map(|k| MemItem {
                role: "knowledge".into(),
                content: format!("{}: {}", k.name, clip(&k.content)),
                score: k.score,
            })),
            Err(e) => tracing::warn!("memory: knowledge search failed: {e}"),
        }
        items
    }
}

/// The system message that shows `items` to the LLM, or None when there are none.
pub fn memory_message(items: &[MemItem]) -> Option<String> {
    if items.is_empty() {
        return None;
    }
    let mut text = String::from(
        "What memory holds that may be relevant (role, score: higher is more relevant):\n",
    );
    for m in items {
        // Search scores of a small corpus can be tiny: keep two significant digits.
        let score = if m.score >= 0.01 || m.score == 0.0 {
            format!("{:.2}", m.score)
        } else {
            format!("{:.1e}", m.score)
        };
        text.push_str(&format!("- [{} {score}] {}\n", m.role, m.content));
    }
    Some(text)
}
