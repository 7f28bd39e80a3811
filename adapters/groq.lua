-- Groq chat completions (OpenAI-compatible): https://api.groq.com + /openai/v1/chat/completions.
-- The broker adds `Authorization: Bearer <key>`.
--
-- Starts from the built-in openai adapter (`builtin("openai")`: it already reads usage
-- under `x_groq`, `reasoning` deltas, and error frames inside a stream) and changes:
-- * Groq answers 400 to `logprobs`, `logit_bias`, `top_logprobs` and to `name` on
--   messages: they are dropped (logged at warn). `disable_thinking` and the messages'
--   `reasoning_content` are dropped as openai.lua does (Groq has no thinking switch that
--   every model takes).
-- * A failed tool generation arrives INSIDE the stream as an `event: error` frame whose
--   data is `{"error": {..., "code": "tool_use_failed", "failed_generation": ...,
--   "status_code": 400}}` (also as a 400 body): openai.lua raises it as the API's typed
--   error (HTTP 400, invalid_request_error, tool_use_failed) whose message ends with what
--   the model generated.

local adapter = builtin("openai")
adapter.name = "groq"
adapter.version = "1.0.0"
adapter.endpoint = "/openai/v1/chat/completions"
adapter.headers = {}

local openai_request = adapter.transform_request

local UNSUPPORTED = { "logprobs", "logit_bias", "top_logprobs" }

function adapter.transform_request(raw_json)
  local body = json.decode(openai_request(raw_json))
  for _, k in ipairs(UNSUPPORTED) do
    if body[k] ~= nil then
      log("warn", "groq does not support `" .. k .. "`: dropped")
      body[k] = nil
    end
  end
  for _, msg in ipairs(type(body.messages) == "table" and body.messages or {}) do
    msg.name = nil
  end
  return json.encode(body)
end

return adapter
