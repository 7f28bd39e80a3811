package host

import (
	"bytes"
	"encoding/json"

	"google.golang.org/grpc/codes"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// settingsAPI implements SettingsAPIE over the Settings service.
type settingsAPI struct{ s *Services }

func (a settingsAPI) value(method, text string) (interface{}, error) {
	var v interface{}
	if err := a.s.fromJSON(method, text, &v); err != nil {
		return nil, err
	}
	return v, nil
}

func (a settingsAPI) Get(key string) (interface{}, error) {
	const m = "Settings.Get"
	r, err := call(a.s, m, a.s.settings.Get, &pb.KeyRequest{Key: key})
	if err != nil {
		return nil, err
	}
	return a.value(m, r.GetValueJson())
}

func (a settingsAPI) set(method string, plugin, key string, value interface{}) (*pb.SetRequest, error) {
	text, err := a.s.toJSON(method, value)
	if err != nil {
		return nil, err
	}
	return &pb.SetRequest{Key: key, ValueJson: text, Plugin: plugin}, nil
}

func (a settingsAPI) Set(key string, value interface{}) error {
	const m = "Settings.Set"
	req, err := a.set(m, "", key, value)
	if err != nil {
		return err
	}
	_, err = call(a.s, m, a.s.settings.Set, req)
	return err
}

func (a settingsAPI) List(prefix string) ([]string, error) {
	r, err := call(a.s, "Settings.List", a.s.settings.List, &pb.PrefixRequest{Prefix: prefix})
	return keys(r, err)
}

func (a settingsAPI) GetCore(key string) (interface{}, error) {
	const m = "Settings.GetCore"
	r, err := call(a.s, m, a.s.settings.GetCore, &pb.KeyRequest{Key: key})
	if err != nil {
		return nil, err
	}
	return a.value(m, r.GetValueJson())
}

func (a settingsAPI) SetCore(key string, value interface{}) error {
	const m = "Settings.SetCore"
	req, err := a.set(m, "", key, value)
	if err != nil {
		return err
	}
	_, err = call(a.s, m, a.s.settings.SetCore, req)
	return err
}

func (a settingsAPI) ListCore(prefix string) ([]string, error) {
	r, err := call(a.s, "Settings.ListCore", a.s.settings.ListCore, &pb.PrefixRequest{Prefix: prefix})
	return keys(r, err)
}

func (a settingsAPI) GetPlugin(plugin, key string) (interface{}, error) {
	const m = "Settings.GetPlugin"
	r, err := call(a.s, m, a.s.settings.GetPlugin, &pb.KeyRequest{Key: key, Plugin: plugin})
	if err != nil {
		return nil, err
	}
	return a.value(m, r.GetValueJson())
}

func (a settingsAPI) SetPlugin(plugin, key string, value interface{}) error {
	const m = "Settings.SetPlugin"
	req, err := a.set(m, plugin, key, value)
	if err != nil {
		return err
	}
	_, err = call(a.s, m, a.s.settings.SetPlugin, req)
	return err
}

func (a settingsAPI) ListPlugin(plugin, prefix string) ([]string, error) {
	r, err := call(a.s, "Settings.ListPlugin", a.s.settings.ListPlugin, &pb.PrefixRequest{Prefix: prefix, Plugin: plugin})
	return keys(r, err)
}

func (a settingsAPI) RegisterDef(def ConfigDef) { a.s.logged(a.RegisterDefE(def)) }

func (a settingsAPI) RegisterDefE(def ConfigDef) error {
	const m = "Settings.RegisterDef"
	if def.Key == "" {
		return NewHostError(a.s.plugin, m, codes.InvalidArgument, "ConfigDef needs a key")
	}
	w, err := def.toWire(a.s, m)
	if err != nil {
		return err
	}
	_, err = call(a.s, m, a.s.settings.RegisterDef, w)
	return err
}

func (a settingsAPI) Defs(prefix string) []*ConfigDef {
	defs, err := a.DefsE(prefix)
	a.s.logged(err)
	return defs
}

func (a settingsAPI) DefsE(prefix string) ([]*ConfigDef, error) {
	const m = "Settings.Defs"
	r, err := call(a.s, m, a.s.settings.Defs, &pb.PrefixRequest{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	out := make([]*ConfigDef, 0, len(r.GetDefs()))
	for _, w := range r.GetDefs() {
		d, err := defFromWire(a.s, m, w)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (a settingsAPI) Dump() map[string]interface{} {
	d, err := a.DumpE()
	a.s.logged(err)
	return d
}

func (a settingsAPI) DumpE() (map[string]interface{}, error) {
	const m = "Settings.Dump"
	r, err := call(a.s, m, a.s.settings.Dump, &pb.Empty{})
	if err != nil {
		return nil, err
	}
	return a.s.object(m, r.GetDumpJson())
}

func (a settingsAPI) Plugins() []string {
	p, err := a.PluginsE()
	a.s.logged(err)
	return p
}

func (a settingsAPI) PluginsE() ([]string, error) {
	r, err := call(a.s, "Settings.Plugins", a.s.settings.Plugins, &pb.Empty{})
	return keys(r, err)
}

// keys is the (non-nil) key list of a KeysResponse.
func keys(r *pb.KeysResponse, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	k := r.GetKeys()
	if k == nil {
		k = []string{}
	}
	return k, nil
}

// toWire is the wire ConfigDef: Type "" → "string"; Default, Min, Max, Step sent
// when non-zero or flagged.
func (d ConfigDef) toWire(s *Services, method string) (*pb.ConfigDef, error) {
	w := &pb.ConfigDef{
		Key:         d.Key,
		Type:        d.Type,
		DisplayName: d.DisplayName,
		Description: d.Description,
		Category:    d.Category,
		Options:     d.Options,
		Required:    d.Required,
		Secret:      d.Secret,
	}
	if w.Type == "" {
		w.Type = "string"
	}
	if d.Default != nil || d.HasDefault {
		text, err := s.toJSON(method, d.Default)
		if err != nil {
			return nil, err
		}
		w.DefaultJson = text
	}
	if d.Min != 0 || d.HasMin {
		v := d.Min
		w.Min = &v
	}
	if d.Max != 0 || d.HasMax {
		v := d.Max
		w.Max = &v
	}
	if d.Step != 0 || d.HasStep {
		v := d.Step
		w.Step = &v
	}
	return w, nil
}

// defFromWire is a ConfigDef from the wire, flags set for what is present.
func defFromWire(s *Services, method string, w *pb.ConfigDef) (*ConfigDef, error) {
	d := &ConfigDef{
		Key:         w.GetKey(),
		Type:        w.GetType(),
		DisplayName: w.GetDisplayName(),
		Description: w.GetDescription(),
		Category:    w.GetCategory(),
		Options:     w.GetOptions(),
		Required:    w.GetRequired(),
		Secret:      w.GetSecret(),
	}
	if w.GetDefaultJson() != "" {
		if err := s.fromJSON(method, w.GetDefaultJson(), &d.Default); err != nil {
			return nil, err
		}
		d.HasDefault = true
	}
	if w.Min != nil {
		d.Min, d.HasMin = *w.Min, true
	}
	if w.Max != nil {
		d.Max, d.HasMax = *w.Max, true
	}
	if w.Step != nil {
		d.Step, d.HasStep = *w.Step, true
	}
	return d, nil
}

// configDefJSON is ConfigDef's JSON shape with optional fields as pointers, so that
// a flagged zero is written.
type configDefJSON struct {
	Key         string       `json:"key"`
	Default     *interface{} `json:"default,omitempty"`
	Type        string       `json:"type"`
	DisplayName string       `json:"display_name"`
	Description string       `json:"description,omitempty"`
	Category    string       `json:"category,omitempty"`
	Options     []string     `json:"options,omitempty"`
	Min         *float64     `json:"min,omitempty"`
	Max         *float64     `json:"max,omitempty"`
	Step        *float64     `json:"step,omitempty"`
	Required    bool         `json:"required,omitempty"`
	Secret      bool         `json:"secret,omitempty"`
}

func optFloat(v float64, has bool) *float64 {
	if v == 0 && !has {
		return nil
	}
	return &v
}

// MarshalJSON writes the seed's JSON of the def: the seed's tags, with default,
// min, max and step also written when their Has… flag is set.
func (d ConfigDef) MarshalJSON() ([]byte, error) {
	j := configDefJSON{
		Key: d.Key, Type: d.Type, DisplayName: d.DisplayName, Description: d.Description,
		Category: d.Category, Options: d.Options, Required: d.Required, Secret: d.Secret,
		Min: optFloat(d.Min, d.HasMin), Max: optFloat(d.Max, d.HasMax), Step: optFloat(d.Step, d.HasStep),
	}
	if d.Default != nil || d.HasDefault {
		v := d.Default
		j.Default = &v
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the seed's JSON of a def, setting the Has… flags of the keys
// present (`"default": null` included). JSON null leaves the def as it is.
func (d *ConfigDef) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	var j configDefJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*d = ConfigDef{
		Key: j.Key, Type: j.Type, DisplayName: j.DisplayName, Description: j.Description,
		Category: j.Category, Options: j.Options, Required: j.Required, Secret: j.Secret,
	}
	if _, ok := raw["default"]; ok {
		d.HasDefault = true
		if j.Default != nil {
			d.Default = *j.Default
		}
	}
	if j.Min != nil {
		d.Min, d.HasMin = *j.Min, true
	}
	if j.Max != nil {
		d.Max, d.HasMax = *j.Max, true
	}
	if j.Step != nil {
		d.Step, d.HasStep = *j.Step, true
	}
	return nil
}
