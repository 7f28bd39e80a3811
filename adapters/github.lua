-- GitHub Models (OpenAI-compatible): base_url https://models.github.ai/inference (or
-- https://models.github.ai/orgs/<org>/inference to bill an organization) + /chat/completions.
-- The source's key is a GitHub token with the `models` scope, sent by the broker as
-- `Authorization: Bearer <key>`. Models are named `publisher/name` (`openai/gpt-4.1`).
--
-- Starts from the built-in openai adapter (`builtin("openai")`: responses, streams —
-- Azure's `choices: []` content-filter preamble is skipped — and `{"error": {"code",
-- "message", "details"}}` bodies work as they are) and changes:
-- * The headers GitHub's REST API documents (`Accept`, `X-GitHub-Api-Version`).
-- * OpenAI reasoning models (`openai/o1…`, `o3…`, `o4…`, `gpt-5…`) reject `max_tokens`
--   and a non-default `temperature`: `max_tokens` is sent as `max_completion_tokens` and
--   `temperature` left out for them.

local adapter = builtin("openai")
adapter.name = "github"
adapter.version = "1.0.0"
adapter.endpoint = "/chat/completions"
adapter.headers = {
  ["Accept"] = "application/vnd.github+json",
  ["X-GitHub-Api-Version"] = "2022-11-28",
}

local openai_request = adapter.transform_request

-- `openai/o3-mini`, `o1`, `openai/gpt-5-mini`, …: OpenAI's reasoning models.
local function reasoning_model(model)
  if type(model) ~= "string" then
    return false
  end
  local m = model:lower():gsub("^openai/", "")
  return m:match("^o%d") ~= nil or m:match("^gpt%-5") ~= nil
end

function adapter.transform_request(raw_json)
  local body = json.decode(openai_request(raw_json))
  if reasoning_model(body.model) then
    if body.max_tokens ~= nil and body.max_completion_tokens == nil then
      body.max_completion_tokens = body.max_tokens
    end
    body.max_tokens = nil
    body.temperature = nil
  end
  return json.encode(body)
end

return adapter
