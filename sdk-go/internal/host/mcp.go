package host

import (
	"fmt"

	"google.golang.org/grpc/codes"

	pb "github.com/hearth-dev/hearth/sdk-go/hearthpb"
)

// mcpMaxPages is the most pages a listing method follows (nextCursor) before it stops.
const mcpMaxPages = 1000

// mcpAPI implements McpAPI over the Mcp service.
type mcpAPI struct{ s *Services }

const mcpMethod = "Mcp.Request"

func (a mcpAPI) Request(server, method string, params map[string]interface{}) (map[string]interface{}, error) {
	text := ""
	if params != nil {
		var err error
		if text, err = a.s.toJSON(mcpMethod, params); err != nil {
			return nil, err
		}
	}
	r, err := call(a.s, mcpMethod, a.s.mcp.Request, &pb.McpRequest{Server: server, Method: method, ParamsJson: text})
	if err != nil {
		return nil, err
	}
	return a.s.object(mcpMethod, r.GetResultJson())
}

// objects is the list under key of an MCP result, each item an object.
func (a mcpAPI) objects(server, method, key string, result map[string]interface{}) ([]map[string]interface{}, error) {
	raw, ok := result[key]
	if !ok || raw == nil {
		return []map[string]interface{}{}, nil
	}
	list, ok := raw.([]interface{})
	if !ok {
		return nil, NewHostError(a.s.plugin, mcpMethod, codes.Internal,
			fmt.Sprintf("%s of MCP server %s: `%s` is not a list", method, server, key))
	}
	out := make([]map[string]interface{}, 0, len(list))
	for i, item := range list {
		obj, ok := item.(map[string]interface{})
		if !ok {
			return nil, NewHostError(a.s.plugin, mcpMethod, codes.Internal,
				fmt.Sprintf("%s of MCP server %s: `%s` item %d is not an object", method, server, key, i))
		}
		out = append(out, obj)
	}
	return out, nil
}

// items is every item of key over the pages of list method method.
func (a mcpAPI) items(server, method, key string) ([]map[string]interface{}, error) {
	all := []map[string]interface{}{}
	cursor := ""
	for page := 0; page < mcpMaxPages; page++ {
		var params map[string]interface{}
		if page > 0 {
			params = map[string]interface{}{"cursor": cursor}
		}
		result, err := a.Request(server, method, params)
		if err != nil {
			return nil, err
		}
		if _, ok := result[key]; !ok {
			return nil, NewHostError(a.s.plugin, mcpMethod, codes.Internal,
				fmt.Sprintf("%s of MCP server %s: no `%s` list in the result", method, server, key))
		}
		got, err := a.objects(server, method, key, result)
		if err != nil {
			return nil, err
		}
		all = append(all, got...)
		next, _ := result["nextCursor"].(string)
		if next == "" || next == cursor {
			break
		}
		cursor = next
	}
	return all, nil
}

func (a mcpAPI) Resources(server string) ([]map[string]interface{}, error) {
	return a.items(server, "resources/list", "resources")
}

func (a mcpAPI) ResourceTemplates(server string) ([]map[string]interface{}, error) {
	return a.items(server, "resources/templates/list", "resourceTemplates")
}

func (a mcpAPI) ReadResource(server, uri string) ([]map[string]interface{}, error) {
	result, err := a.Request(server, "resources/read", map[string]interface{}{"uri": uri})
	if err != nil {
		return nil, err
	}
	return a.objects(server, "resources/read", "contents", result)
}

func (a mcpAPI) Prompts(server string) ([]map[string]interface{}, error) {
	return a.items(server, "prompts/list", "prompts")
}

func (a mcpAPI) GetPrompt(server, name string, arguments map[string]string) (map[string]interface{}, error) {
	args := map[string]interface{}{}
	for k, v := range arguments {
		args[k] = v
	}
	return a.Request(server, "prompts/get", map[string]interface{}{"name": name, "arguments": args})
}
