//! Graph memory as the broker keeps it (`broker/src/storage/memory.rs`), in memory:
//! entities by name (trimmed, compared in Unicode lower case), relations with soft and
//! hard purge, breadth-first recall, merge and introspection.

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Value};
use tonic::Status;

use crate::apis::{Entity, Relation, Triple};

/// How many entities `introspect` lists as the most mentioned.
const TOP_ENTITIES: usize = 10;

/// The criteria names of `Memory.Purge`.
const CRITERIA: [&str; 4] = [
    "subject_contains",
    "target_contains",
    "relation_type",
    "session_id",
];

#[derive(Debug, Clone)]
struct EntityRow {
    id: u64,
    name: String,
    folded: String,
    r#type: String,
    mentions: i64,
}

#[derive(Debug, Clone)]
struct RelationRow {
    id: u64,
    source: u64,
    target: u64,
    relation_type: String,
    session_id: String,
    active: bool,
}

/// The graph.
#[derive(Debug, Default, Clone)]
pub(crate) struct Graph {
    entities: Vec<EntityRow>,
    relations: Vec<RelationRow>,
    next_id: u64,
}

fn fold(name: &str) -> String {
    name.trim().to_lowercase()
}

fn invalid(what: impl std::fmt::Display, reason: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{what}: {reason}"))
}

impl Graph {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn find(&self, folded: &str) -> Option<&EntityRow> {
        self.entities.iter().find(|e| e.folded == folded)
    }

    fn entity(&self, id: u64) -> &EntityRow {
        self.entities
            .iter()
            .find(|e| e.id == id)
            .expect("relations point at entities")
    }

    fn public(e: &EntityRow) -> Entity {
        Entity {
            name: e.name.clone(),
            r#type: e.r#type.clone(),
            mention_count: e.mentions,
        }
    }

    fn relation(&self, r: &RelationRow) -> Relation {
        Relation {
            source_name: self.entity(r.source).name.clone(),
            target_name: self.entity(r.target).name.clone(),
            relation_type: r.relation_type.clone(),
        }
    }

    fn upsert(&mut self, name: &str, kind: &str) -> u64 {
        let folded = fold(name);
        if let Some(e) = self.entities.iter_mut().find(|e| e.folded == folded) {
            e.mentions += 1;
            if !kind.is_empty() {
                e.r#type = kind.into();
            }
            return e.id;
        }
        let id = self.id();
        self.entities.push(EntityRow {
            id,
            name: name.into(),
            folded,
            r#type: kind.into(),
            mentions: 1,
        });
        id
    }

    /// Stores triples (all or none); returns how many relations were added.
    pub(crate) fn commit(&mut self, triples: Vec<Triple>) -> Result<u64, Status> {
        let mut clean = Vec::with_capacity(triples.len());
        for (index, t) in triples.into_iter().enumerate() {
            let t = Triple {
                subject: t.subject.trim().into(),
                relation: t.relation.trim().into(),
                object: t.object.trim().into(),
                subject_type: t.subject_type.trim().into(),
                object_type: t.object_type.trim().into(),
                session_id: t.session_id.trim().into(),
            };
            for (field, value) in [
                ("subject", &t.subject),
                ("relation", &t.relation),
                ("object", &t.object),
            ] {
                if value.is_empty() {
                    return Err(invalid(
                        format!("commit: triple {index}"),
                        format!("empty `{field}`"),
                    ));
                }
            }
            clean.push(t);
        }
        let mut added = 0;
        for t in clean {
            let source = self.upsert(&t.subject, &t.subject_type);
            let target = self.upsert(&t.object, &t.object_type);
            let duplicate = self.relations.iter().any(|r| {
                r.active
                    && r.source == source
                    && r.target == target
                    && r.relation_type == t.relation
            });
            if !duplicate {
                let id = self.id();
                self.relations.push(RelationRow {
                    id,
                    source,
                    target,
                    relation_type: t.relation,
                    session_id: t.session_id,
                    active: true,
                });
                added += 1;
            }
        }
        Ok(added)
    }

    /// The entities whose names contain a keyword and what lies within `depth` active
    /// relations of them, breadth first.
    pub(crate) fn recall(&self, keywords: &[String], depth: u32) -> (Vec<Entity>, Vec<Relation>) {
        let mut folded: Vec<String> = keywords
            .iter()
            .map(|k| fold(k))
            .filter(|k| !k.is_empty())
            .collect();
        folded.sort();
        folded.dedup();
        let mut visited = HashSet::new();
        let mut seeds = Vec::new();
        for k in &folded {
            for e in self
                .entities
                .iter()
                .filter(|e| e.folded.contains(k.as_str()))
            {
                if visited.insert(e.id) {
                    seeds.push(e.id);
                }
            }
        }
        if seeds.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let mut levels = vec![seeds];
        let mut walked = HashSet::new();
        let mut edges = Vec::new();
        for _ in 0..depth {
            let frontier = levels.last().expect("seeds are a level");
            if frontier.is_empty() {
                break;
            }
            let mut next = Vec::new();
            for r in self.relations.iter().filter(|r| {
                r.active && (frontier.contains(&r.source) || frontier.contains(&r.target))
            }) {
                if !walked.insert(r.id) {
                    continue;
                }
                edges.push(self.relation(r));
                for end in [r.source, r.target] {
                    if visited.insert(end) {
                        next.push(end);
                    }
                }
            }
            levels.push(next);
        }
        let mut entities = Vec::new();
        for level in levels {
            let mut level: Vec<Entity> = level
                .into_iter()
                .map(|id| Self::public(self.entity(id)))
                .collect();
            level.sort_by(|a, b| {
                b.mention_count
                    .cmp(&a.mention_count)
                    .then_with(|| a.name.cmp(&b.name))
            });
            entities.extend(level);
        }
        (entities, edges)
    }

    /// Counts of the graph, as `Memory.Introspect`'s `stats_json`.
    pub(crate) fn introspect(&self) -> Value {
        let active: Vec<&RelationRow> = self.relations.iter().filter(|r| r.active).collect();
        let mut entity_types: BTreeMap<String, u64> = BTreeMap::new();
        for e in &self.entities {
            *entity_types.entry(e.r#type.clone()).or_default() += 1;
        }
        let mut relation_types: BTreeMap<String, u64> = BTreeMap::new();
        for r in &active {
            *relation_types.entry(r.relation_type.clone()).or_default() += 1;
        }
        let sessions: HashSet<&str> = active
            .iter()
            .map(|r| r.session_id.as_str())
            .filter(|s| !s.is_empty())
            .collect();
        let mut top: Vec<Entity> = self.entities.iter().map(Self::public).collect();
        top.sort_by(|a, b| {
            b.mention_count
                .cmp(&a.mention_count)
                .then_with(|| a.name.cmp(&b.name))
        });
        top.truncate(TOP_ENTITIES);
        json!({
            "entities": self.entities.len(),
            "relations": active.len(),
            "inactive_relations": self.relations.len() - active.len(),
            "entity_types": entity_types,
            "relation_types": relation_types,
            "sessions": sessions.len(),
            "top_entities": top,
        })
    }

    /// Merges `source` into `target`; returns how many relations were redirected.
    pub(crate) fn merge(&mut self, source: &str, target: &str) -> Result<u64, Status> {
        let (source, target) = (source.trim(), target.trim());
        if fold(source) == fold(target) {
            return Err(invalid(
                "merge entities",
                format!("`{source}` and `{target}` are the same entity"),
            ));
        }
        let not_found = |name: &str| Status::not_found(format!("no `{name}` in entities"));
        let s = self
            .find(&fold(source))
            .cloned()
            .ok_or_else(|| not_found(source))?;
        let t = self
            .find(&fold(target))
            .cloned()
            .ok_or_else(|| not_found(target))?;
        // Would-be self-loops.
        self.relations.retain(|r| {
            !((r.source == s.id && (r.target == s.id || r.target == t.id))
                || (r.target == s.id && r.source == t.id))
        });
        // Would-be duplicates of target's active relations.
        let existing: Vec<(u64, u64, String)> = self
            .relations
            .iter()
            .filter(|r| r.active)
            .map(|r| (r.source, r.target, r.relation_type.clone()))
            .collect();
        self.relations.retain(|r| {
            let dup_out = r.active
                && r.source == s.id
                && existing.contains(&(t.id, r.target, r.relation_type.clone()));
            let dup_in = r.active
                && r.target == s.id
                && existing.contains(&(r.source, t.id, r.relation_type.clone()));
            !(dup_out || dup_in)
        });
        let mut moved = 0;
        for r in &mut self.relations {
            if r.source == s.id {
                r.source = t.id;
                moved += 1;
            }
            if r.target == s.id {
                r.target = t.id;
                moved += 1;
            }
        }
        if let Some(e) = self.entities.iter_mut().find(|e| e.id == t.id) {
            e.mentions += s.mentions;
            if e.r#type.is_empty() {
                e.r#type = s.r#type.clone();
            }
        }
        self.entities.retain(|e| e.id != s.id);
        Ok(moved)
    }

    /// Removes the relations matching every criterion; `mode` `soft` or `hard`.
    pub(crate) fn purge(
        &mut self,
        criteria: &BTreeMap<String, String>,
        mode: &str,
    ) -> Result<u64, Status> {
        let mut given: BTreeMap<&str, String> = BTreeMap::new();
        for (key, value) in criteria {
            if !CRITERIA.contains(&key.as_str()) {
                return Err(invalid(
                    "purge",
                    format!(
                        "unknown criterion `{key}` (expected one of {})",
                        CRITERIA.join(", ")
                    ),
                ));
            }
            let value = value.trim();
            if !value.is_empty() {
                given.insert(key.as_str(), value.to_string());
            }
        }
        let hard = match mode {
            "soft" => false,
            "hard" => true,
            other => {
                return Err(invalid(
                    "purge",
                    format!("mode {other:?}: expected \"soft\" or \"hard\""),
                ))
            }
        };
        if given.is_empty() {
            return Err(invalid(
                "purge",
                format!("no criteria (give at least one of {})", CRITERIA.join(", ")),
            ));
        }
        let matches = |g: &Graph, r: &RelationRow| -> bool {
            given.iter().all(|(k, v)| match *k {
                "subject_contains" => g.entity(r.source).folded.contains(&fold(v)),
                "target_contains" => g.entity(r.target).folded.contains(&fold(v)),
                "relation_type" => r.relation_type == *v,
                _ => r.session_id == *v,
            })
        };
        let hit: Vec<u64> = self
            .relations
            .iter()
            .filter(|r| (hard || r.active) && matches(self, r))
            .map(|r| r.id)
            .collect();
        if !hard {
            for r in self.relations.iter_mut().filter(|r| hit.contains(&r.id)) {
                r.active = false;
            }
            return Ok(hit.len() as u64);
        }
        let touched: HashSet<u64> = self
            .relations
            .iter()
            .filter(|r| hit.contains(&r.id))
            .flat_map(|r| [r.source, r.target])
            .collect();
        self.relations.retain(|r| !hit.contains(&r.id));
        let used: HashSet<u64> = self
            .relations
            .iter()
            .flat_map(|r| [r.source, r.target])
            .collect();
        self.entities
            .retain(|e| !touched.contains(&e.id) || used.contains(&e.id));
        Ok(hit.len() as u64)
    }

    /// Every entity, oldest first.
    pub(crate) fn entities(&self) -> Vec<Entity> {
        self.entities.iter().map(Self::public).collect()
    }

    /// Every active relation, oldest first.
    pub(crate) fn relations(&self) -> Vec<Relation> {
        self.relations
            .iter()
            .filter(|r| r.active)
            .map(|r| self.relation(r))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(s: &str, r: &str, o: &str) -> Relation {
        Relation {
            source_name: s.into(),
            target_name: o.into(),
            relation_type: r.into(),
        }
    }

    #[test]
    fn commit_recall_merge_and_purge_like_the_broker() {
        let mut g = Graph::default();
        let added = g
            .commit(vec![
                Triple::new("Alice", "likes", "Coffee"),
                Triple::new("alice ", "likes", "coffee"),
                Triple::new("Bob", "likes", "Coffee"),
                Triple::new("Coffee", "grown_in", "Brazil"),
            ])
            .unwrap();
        assert_eq!(added, 3, "the duplicate active relation is not added");
        let (entities, relations) = g.recall(&["ALI".into()], 1);
        assert_eq!(entities[0].name, "Alice");
        assert_eq!(entities[0].mention_count, 2);
        assert_eq!(relations, [rel("Alice", "likes", "Coffee")]);
        let (entities, relations) = g.recall(&["alice".into()], 2);
        assert_eq!(entities.len(), 4);
        assert_eq!(relations.len(), 3);
        assert!(g.recall(&[" ".into()], 3).0.is_empty());

        let err = g.commit(vec![Triple::new("a", "", "b")]).unwrap_err();
        assert_eq!(err.message(), "commit: triple 0: empty `relation`");

        assert_eq!(
            g.merge("Bob", "Alice").unwrap(),
            0,
            "Bob's edge was a duplicate"
        );
        assert_eq!(g.relations().len(), 2);
        assert_eq!(
            g.merge("nobody", "Alice").unwrap_err().code(),
            tonic::Code::NotFound
        );

        let criteria: BTreeMap<String, String> =
            [("relation_type".to_string(), "likes".to_string())].into();
        assert_eq!(g.purge(&criteria, "soft").unwrap(), 1);
        assert_eq!(g.introspect()["inactive_relations"], 1);
        assert_eq!(g.purge(&criteria, "hard").unwrap(), 1);
        assert_eq!(g.introspect()["inactive_relations"], 0);
        assert!(
            g.entities().iter().all(|e| e.name != "Alice"),
            "an entity left with no relation is deleted by a hard purge"
        );
        assert!(g
            .purge(&BTreeMap::new(), "soft")
            .unwrap_err()
            .message()
            .contains("no criteria"));
        assert!(g
            .purge(&criteria, "gentle")
            .unwrap_err()
            .message()
            .contains("expected \"soft\" or \"hard\""));
    }
}
