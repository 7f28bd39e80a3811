-- Ollama's native chat API: base_url http://localhost:11434 + /api/chat. No key needed
-- (one set on the source is sent as `Authorization: Bearer <key>`, as proxies want).
--
-- Streaming is NDJSON (`application/x-ndjson`: one JSON object a line), not SSE:
-- `stream_format = "ndjson"` tells the broker to hand `transform_stream_chunk` one line
-- at a time.
--
-- The unified request (OpenAI wire shape) → Ollama:
-- * `temperature`, `max_tokens` (→ `num_predict`), `top_p`, `top_k`, `seed`, `stop`,
--   `presence_penalty`, `frequency_penalty`, `num_ctx` go into `options` (merged with an
--   `options` the caller set); `format`, `keep_alive`, `think` pass through;
--   `disable_thinking: true` → `think: false`; `tool_choice` is dropped (Ollama has none);
--   other extra keys are dropped. `stream` is always sent (Ollama streams by default).
-- * Assistant tool calls: `function.arguments` as an OBJECT (JSON text is parsed);
--   `reasoning_content` → `thinking`. Tool results: role `tool` with `tool_name` (Ollama
--   matches results by name), found from the call id in the preceding assistant turn, or
--   by position when ids are missing.
-- * Multimodal content: text parts are joined; `data:` image URLs go to `images` (base64);
--   remote image URLs cannot be sent (Ollama takes base64 only): dropped with a warning.
--
-- Ollama → unified:
-- * Tool calls carry no id (newer servers may send one: it is kept): the id stays empty
--   and the broker makes up one unique in the conversation (an id counted per response,
--   `call_0`, would come back every turn).
-- * In a stream each call arrives whole in one chunk, without an index that is unique in
--   the turn; calls get increasing indexes from a counter of this adapter (never reused,
--   so concurrent streams sharing the adapter cannot mix their calls).
-- * `done_reason` is the finish reason, except that Ollama says `stop` also after tool
--   calls: with calls (in the response, or in the stream's last chunk; the broker sees the
--   whole stream) it is `tool_calls`. Usage = `prompt_eval_count`, `eval_count`, their sum.
-- * `{"error": "..."}` (an error status's body, or a line in the middle of a stream) is
--   raised as the API's typed error (`raise_api_error`) with the message.

local adapter = {
  name = "ollama",
  version = "1.0.0",
  endpoint = "/api/chat",
  headers = {},
  stream_format = "ndjson",
}

local OPTIONS = {
  temperature = "temperature", max_tokens = "num_predict", top_p = "top_p", top_k = "top_k",
  seed = "seed", stop = "stop", presence_penalty = "presence_penalty",
  frequency_penalty = "frequency_penalty", num_ctx = "num_ctx",
}
local PASS = { "format", "keep_alive", "think" }

local function decode_body(raw)
  local ok, body = pcall(json.decode, raw)
  if not ok or type(body) ~= "table" then
    error("response is not a JSON object: " .. string.sub(raw, 1, 200), 0)
  end
  if body.error ~= nil then
    local e = body.error
    if type(e) == "table" then
      e = e.message
    end
    raise_api_error({ message = type(e) == "string" and e or tostring(e) })
  end
  return body
end

-- A unified message's content → (text, base64 images or nil).
local function content_of(content)
  if type(content) == "string" then
    return content, nil
  end
  if type(content) ~= "table" then
    return "", nil
  end
  local text, images = {}, {}
  for _, part in ipairs(content) do
    if type(part) == "table" then
      if type(part.text) == "string" then
        text[#text + 1] = part.text
      elseif part.type == "image_url" then
        local url = type(part.image_url) == "table" and part.image_url.url or part.image_url
        local data = type(url) == "string" and url:match("^data:[^,]*;base64,(.*)$")
        if data then
          images[#images + 1] = data
        else
          log("warn", "ollama takes base64 images only: dropped " .. tostring(url))
        end
      end
    end
  end
  return table.concat(text, "\n"), (#images > 0 and images or nil)
end

local function arguments_object(args)
  if type(args) == "table" then
    return args
  end
  if type(args) ~= "string" or args:match("^%s*$") then
    return {}
  end
  local ok, parsed = pcall(json.decode, args)
  if ok and type(parsed) == "table" and getmetatable(parsed) == nil then
    return parsed
  end
  return { _raw = args }
end

function adapter.transform_request(raw_json)
  local req = json.decode(raw_json)
  local body = { model = req.model, stream = req.stream == true }

  local options = {}
  if type(req.options) == "table" then
    for k, v in pairs(req.options) do
      options[k] = v
    end
  end
  for from, to in pairs(OPTIONS) do
    if req[from] ~= nil and options[to] == nil then
      local v = req[from]
      if type(v) == "number" then
        v = math.tointeger(v) or v
      end
      options[to] = v
    end
  end
  if next(options) ~= nil then
    body.options = options
  end
  for _, k in ipairs(PASS) do
    body[k] = req[k]
  end
  if req.disable_thinking == true and body.think == nil then
    body.think = false
  end
  if type(req.tools) == "table" and #req.tools > 0 then
    body.tools = req.tools
  end

  local messages = json.array()
  local by_id, in_order, next_result = {}, {}, 1 -- the last assistant turn's calls
  for _, msg in ipairs(req.messages or {}) do
    local text, images = content_of(msg.content)
    local out = { role = msg.role, content = text, images = images }
    if msg.role == "assistant" then
      if type(msg.reasoning_content) == "string" and msg.reasoning_content ~= "" then
        out.thinking = msg.reasoning_content
      end
      if type(msg.tool_calls) == "table" and #msg.tool_calls > 0 then
        by_id, in_order, next_result = {}, {}, 1
        out.tool_calls = {}
        for i, tc in ipairs(msg.tool_calls) do
          local fn = tc["function"] or {}
          out.tool_calls[i] = {
            ["function"] = { name = fn.name, arguments = arguments_object(fn.arguments) },
          }
          if type(tc.id) == "string" and tc.id ~= "" then
            by_id[tc.id] = fn.name
          end
          in_order[i] = fn.name
        end
      end
    elseif msg.role == "tool" then
      out.tool_name = msg.tool_name or msg.name or by_id[msg.tool_call_id] or in_order[next_result]
      next_result = next_result + 1
    end
    messages[#messages + 1] = out
  end
  body.messages = messages
  return json.encode(body)
end

-- `done_reason` → the unified finish reason (see the header).
local function finish_reason_of(reason, has_calls)
  if has_calls and (reason == nil or reason == "" or reason == "stop") then
    return "tool_calls"
  end
  return type(reason) == "string" and reason or ""
end

local function usage_of(body)
  if body.prompt_eval_count == nil and body.eval_count == nil then
    return nil
  end
  local p, c = body.prompt_eval_count or 0, body.eval_count or 0
  return { prompt = p, completion = c, total = p + c }
end

function adapter.transform_response(raw_json)
  local body = decode_body(raw_json)
  local message = body.message
  if type(message) ~= "table" then
    error("response has no message", 0)
  end
  local tool_calls = {}
  for i, tc in ipairs(message.tool_calls or {}) do
    local fn = tc["function"] or {}
    tool_calls[i] = {
      id = type(tc.id) == "string" and tc.id or "",
      type = "function",
      name = fn.name or "",
      arguments = arguments_object(fn.arguments),
    }
  end
  return {
    content = type(message.content) == "string" and message.content or "",
    reasoning_content = type(message.thinking) == "string" and message.thinking or "",
    finish_reason = finish_reason_of(body.done_reason, #tool_calls > 0),
    token_usage = usage_of(body),
    tool_calls = tool_calls,
  }
end

local calls_seen = 0 -- indexes of streamed calls, unique for the adapter's lifetime

function adapter.transform_stream_chunk(line)
  if line:match("^%s*$") then
    return ""
  end
  local chunk = decode_body(line)
  local message = type(chunk.message) == "table" and chunk.message or {}
  local out = {
    content = type(message.content) == "string" and message.content or "",
    reasoning_content = type(message.thinking) == "string" and message.thinking or "",
    done = chunk.done == true,
  }
  local calls = {}
  for _, tc in ipairs(message.tool_calls or {}) do
    local fn = tc["function"] or {}
    local n = calls_seen
    calls_seen = (calls_seen + 1) % 2147483648
    calls[#calls + 1] = {
      index = n,
      id = type(tc.id) == "string" and tc.id ~= "" and tc.id or nil,
      name = fn.name or "",
      arguments = json.encode(arguments_object(fn.arguments)),
    }
  end
  if #calls > 0 then
    out.tool_calls = calls
  end
  if out.done then
    out.finish_reason = finish_reason_of(chunk.done_reason, #calls > 0)
    out.token_usage = usage_of(chunk)
  end
  if out.content == "" and out.reasoning_content == "" and not out.done and #calls == 0 then
    return ""
  end
  return out
end

return adapter
