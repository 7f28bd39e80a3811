package host

import (
	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// memoryAPI implements MemoryAPIE over the Memory service.
type memoryAPI struct{ s *Services }

func (a memoryAPI) Recall(query []string, depth int) ([]Entity, []Relation, error) {
	r, err := call(a.s, "Memory.Recall", a.s.memory.Recall, &pb.RecallRequest{Keywords: query, Depth: count(depth)})
	if err != nil {
		return nil, nil, err
	}
	ents := make([]Entity, 0, len(r.GetEntities()))
	for _, e := range r.GetEntities() {
		ents = append(ents, Entity{Name: e.GetName(), Type: e.GetType(), MentionCount: int(e.GetMentionCount())})
	}
	rels := make([]Relation, 0, len(r.GetRelations()))
	for _, x := range r.GetRelations() {
		rels = append(rels, Relation{SourceName: x.GetSourceName(), TargetName: x.GetTargetName(), RelationType: x.GetRelationType()})
	}
	return ents, rels, nil
}

func (a memoryAPI) Commit(triples []Triple) error {
	_, err := a.CommitN(triples)
	return err
}

func (a memoryAPI) CommitN(triples []Triple) (int, error) {
	wire := make([]*pb.Triple, 0, len(triples))
	for _, t := range triples {
		wire = append(wire, &pb.Triple{
			Subject: t.Subject, Relation: t.Relation, Object: t.Object,
			SubjectType: t.SubjectType, ObjectType: t.ObjectType, SessionId: t.SessionID,
		})
	}
	r, err := call(a.s, "Memory.Commit", a.s.memory.Commit, &pb.CommitRequest{Triples: wire})
	if err != nil {
		return 0, err
	}
	return int(r.GetCommitted()), nil
}

func (a memoryAPI) Introspect() (map[string]interface{}, error) {
	const m = "Memory.Introspect"
	r, err := call(a.s, m, a.s.memory.Introspect, &pb.Empty{})
	if err != nil {
		return nil, err
	}
	return a.s.object(m, r.GetStatsJson())
}

func (a memoryAPI) MergeEntities(source, target string) (int, error) {
	r, err := call(a.s, "Memory.MergeEntities", a.s.memory.MergeEntities, &pb.MergeRequest{Source: source, Target: target})
	if err != nil {
		return 0, err
	}
	return int(r.GetCount()), nil
}

func (a memoryAPI) Purge(criteria map[string]string, mode string) (int, error) {
	r, err := call(a.s, "Memory.Purge", a.s.memory.Purge, &pb.PurgeRequest{Criteria: criteria, Mode: mode})
	if err != nil {
		return 0, err
	}
	return int(r.GetCount()), nil
}

// textMemoryAPI implements TextMemoryAPI over the TextMemory service.
type textMemoryAPI struct{ s *Services }

func (a textMemoryAPI) Append(evt TextEvent) error {
	_, err := call(a.s, "TextMemory.Append", a.s.textMemory.Append, &pb.TextEvent{
		Role: evt.Role, Content: evt.Content, Timestamp: evt.Timestamp, Channel: evt.Channel,
	})
	return err
}

// docMemoryAPI implements DocMemoryAPIE over the DocMemory service.
type docMemoryAPI struct{ s *Services }

func (a docMemoryAPI) Query(text string, topK int) []*Doc {
	d, err := a.QueryE(text, topK)
	a.s.logged(err)
	return d
}

func (a docMemoryAPI) QueryE(text string, topK int) ([]*Doc, error) {
	r, err := call(a.s, "DocMemory.Query", a.s.docMemory.Query, &pb.DocQuery{Text: text, TopK: count(topK)})
	if err != nil {
		return nil, err
	}
	out := make([]*Doc, 0, len(r.GetDocs()))
	for _, d := range r.GetDocs() {
		out = append(out, &Doc{ID: d.GetId(), Title: d.GetTitle(), Content: d.GetContent(), Score: d.GetScore()})
	}
	return out, nil
}

// Insert sends ID, Title and Content (Score is a query result, not sent); a nil doc
// inserts an empty one, which the broker refuses.
func (a docMemoryAPI) Insert(doc *Doc) error {
	req := &pb.Doc{}
	if doc != nil {
		req = &pb.Doc{Id: doc.ID, Title: doc.Title, Content: doc.Content}
	}
	_, err := call(a.s, "DocMemory.Insert", a.s.docMemory.Insert, req)
	return err
}

func (a docMemoryAPI) Remove(id string) { a.s.logged(a.RemoveE(id)) }

func (a docMemoryAPI) RemoveE(id string) error {
	_, err := call(a.s, "DocMemory.Remove", a.s.docMemory.Remove, &pb.IdRequest{Id: id})
	return err
}

func (a docMemoryAPI) Stats() map[string]interface{} {
	st, err := a.StatsE()
	a.s.logged(err)
	return st
}

func (a docMemoryAPI) StatsE() (map[string]interface{}, error) {
	const m = "DocMemory.Stats"
	r, err := call(a.s, m, a.s.docMemory.Stats, &pb.Empty{})
	if err != nil {
		return nil, err
	}
	return a.s.object(m, r.GetStatsJson())
}

// knowledgeAPI implements KnowledgeAPI over the Knowledge service.
type knowledgeAPI struct{ s *Services }

func (a knowledgeAPI) Search(query string, topK int) ([]*Knowledge, error) {
	r, err := call(a.s, "Knowledge.Search", a.s.knowledge.Search, &pb.KnowledgeQuery{Query: query, TopK: count(topK)})
	if err != nil {
		return nil, err
	}
	out := make([]*Knowledge, 0, len(r.GetEntries()))
	for _, e := range r.GetEntries() {
		out = append(out, &Knowledge{Name: e.GetName(), Content: e.GetContent(), Score: e.GetScore()})
	}
	return out, nil
}

func (a knowledgeAPI) Add(name, content string) error {
	_, err := call(a.s, "Knowledge.Add", a.s.knowledge.Add, &pb.KnowledgeEntry{Name: name, Content: content})
	return err
}

func (a knowledgeAPI) List() ([]string, error) {
	r, err := call(a.s, "Knowledge.List", a.s.knowledge.List, &pb.Empty{})
	return keys(r, err)
}

// llmAPI implements LLMAPIE over the Llm service.
type llmAPI struct{ s *Services }

func (a llmAPI) ListSources() []string {
	l, err := a.ListSourcesE()
	a.s.logged(err)
	return l
}

func (a llmAPI) ListSourcesE() ([]string, error) {
	r, err := call(a.s, "Llm.ListSources", a.s.llm.ListSources, &pb.Empty{})
	return keys(r, err)
}

func (a llmAPI) SetSource(name string) error {
	_, err := call(a.s, "Llm.SetSource", a.s.llm.SetSource, &pb.SourceRequest{Name: name})
	return err
}

func (a llmAPI) CurrentSource() string {
	c, err := a.CurrentSourceE()
	a.s.logged(err)
	return c
}

func (a llmAPI) CurrentSourceE() (string, error) {
	r, err := call(a.s, "Llm.CurrentSource", a.s.llm.CurrentSource, &pb.Empty{})
	if err != nil {
		return "", err
	}
	return r.GetName(), nil
}

// inputAPI implements IOInjectorE over the Input service.
type inputAPI struct{ s *Services }

func (a inputAPI) req(source, channel, text string) *pb.InjectRequest {
	if source == "" {
		source = a.s.plugin
	}
	return &pb.InjectRequest{Source: source, Channel: channel, Text: text}
}

func (a inputAPI) InjectInterruptText(source, channel, text string) {
	a.s.logged(a.InjectInterruptTextE(source, channel, text))
}

func (a inputAPI) InjectText(source, channel, text string) {
	a.s.logged(a.InjectTextE(source, channel, text))
}

func (a inputAPI) InjectTextNoMemory(source, channel, text string) {
	a.s.logged(a.InjectTextNoMemoryE(source, channel, text))
}

func (a inputAPI) InjectInterruptTextE(source, channel, text string) error {
	_, err := call(a.s, "Input.InjectInterruptText", a.s.input.InjectInterruptText, a.req(source, channel, text))
	return err
}

func (a inputAPI) InjectTextE(source, channel, text string) error {
	_, err := call(a.s, "Input.InjectText", a.s.input.InjectText, a.req(source, channel, text))
	return err
}

func (a inputAPI) InjectTextNoMemoryE(source, channel, text string) error {
	_, err := call(a.s, "Input.InjectTextNoMemory", a.s.input.InjectTextNoMemory, a.req(source, channel, text))
	return err
}
