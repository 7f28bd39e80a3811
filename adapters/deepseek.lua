-- DeepSeek chat completions (OpenAI-compatible): https://api.deepseek.com + /chat/completions.
-- The broker adds `Authorization: Bearer <key>`.
--
-- Starts from the built-in openai adapter (`builtin("openai")`: the same transforms of
-- responses, stream chunks — `reasoning_content` deltas included — and error bodies) and
-- changes only the request:
-- * `disable_thinking: true` → `thinking: {"type": "disabled"}` (DeepSeek's toggle; thinking
--   is on by default for deepseek-v4-*). A `thinking` the caller set itself wins.
-- * The assistant messages' `reasoning_content` is KEPT (openai.lua drops it): in thinking
--   mode DeepSeek requires the reasoning of every earlier assistant turn that called tools
--   to come back, else 400 "The `reasoning_content` in the thinking mode must be passed
--   back to the API." An assistant turn with `tool_calls` but no reasoning gets
--   `reasoning_content: ""` (unless thinking is disabled): the check accepts that when the
--   history lost it. Other roles never carry one.
-- * Temperature is passed as given (thinking mode ignores it without an error).

local adapter = builtin("openai")
adapter.name = "deepseek"
adapter.version = "1.0.0"
adapter.endpoint = "/chat/completions"
adapter.headers = {}

local openai_request = adapter.transform_request

function adapter.transform_request(raw_json)
  local req = json.decode(raw_json)
  local body = json.decode(openai_request(raw_json))
  if req.disable_thinking == true and body.thinking == nil then
    body.thinking = { type = "disabled" }
  end
  local thinking_off = type(body.thinking) == "table" and body.thinking.type == "disabled"
  -- openai.lua keeps the messages in order, one for one.
  local given = type(req.messages) == "table" and req.messages or {}
  for i, msg in ipairs(type(body.messages) == "table" and body.messages or {}) do
    if msg.role == "assistant" then
      local reasoning = type(given[i]) == "table" and given[i].reasoning_content
      if type(reasoning) == "string" then
        msg.reasoning_content = reasoning
      elseif msg.tool_calls ~= nil and not thinking_off then
        msg.reasoning_content = ""
      end
    end
  end
  return json.encode(body)
end

return adapter
