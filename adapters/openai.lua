-- OpenAI chat completions: OpenAI itself and any OpenAI-compatible API.
--
-- The source's base_url carries the version (`https://api.openai.com/v1`); the endpoint is
-- appended to it. `headers` are EXTRA headers only: the broker adds
-- `Authorization: Bearer <key>` from the source's key.
--
-- Choices made here:
-- * The unified request is already in OpenAI's wire shape; it is passed through, extra
--   top-level keys included. Dropped: `disable_thinking` (not an OpenAI field), the
--   messages' `reasoning_content` (OpenAI rejects unknown message fields; DeepSeek, which
--   wants it back, has its own adapter), the tool calls' `thought_signature` (Gemini's,
--   kept in history by the broker), an empty `tools` list (OpenAI rejects `[]`) and
--   then `tool_choice` with it.
-- * `max_tokens` is sent as an integer. Streaming asks for usage (`stream_options`).
-- * Tool-call ids in the history: the broker gives every call a unique id, but a history
--   written elsewhere (a client, a hook, an older broker) may hold calls without one, or a
--   later turn repeating an id (`call_0` counted per response). Such a call gets
--   `call_hearth_<n>`, a repeated id `<id>_<n>` (unused in the request); a tool message
--   takes the id of the latest call it names, and one without `tool_call_id` the first
--   call of the assistant turn before it not answered yet.
-- * Tool calls in a response keep the API's ids; an empty or missing id stays empty (the
--   broker makes up a unique one). A response or chunk that carries tool calls and says
--   `finish_reason: "stop"` (Ollama's and other compatible servers) reports `tool_calls`.
-- * Tool-call arguments that are not a JSON object (the model can emit broken JSON) are
--   kept as `{"_raw": "<text>"}` rather than failing the whole turn: the tool loop's
--   schema check then sends the problem back to the model as that tool's error.
-- * An error body (`{"error": {...}}`, also inside a stream) is raised as the API's typed
--   error (`raise_api_error`: message, type, code); a body that is not JSON is a Lua error
--   quoting its start.

local adapter = {}

adapter.name = "openai"
adapter.version = "1.0.0"
adapter.endpoint = "/chat/completions"
adapter.headers = {}

-- The API's error object → raised as the API's typed error (`raise_api_error`): message,
-- type, code and the HTTP status it names (Groq's `status_code`; the broker uses the status
-- of the response when it was an error status). `param` and Groq's `failed_generation`
-- (what the model produced when a tool call failed) are added to the message.
local function raise_error(err)
  if type(err) ~= "table" then
    raise_api_error({ message = type(err) == "string" and err or "(no message)" })
  end
  local message = type(err.message) == "string" and err.message or "(no message)"
  if type(err.param) == "string" then
    message = message .. " (param " .. err.param .. ")"
  end
  if type(err.failed_generation) == "string" then
    message = message .. "; failed generation: " .. err.failed_generation
  end
  local code = err.code
  raise_api_error({
    status = type(err.status_code) == "number" and err.status_code or nil,
    type = type(err.type) == "string" and err.type or nil,
    code = (type(code) == "string" or type(code) == "number") and code or nil,
    message = message,
  })
end

local function check_error(body)
  if body.error ~= nil then
    raise_error(body.error)
  end
  -- Mistral-style: {"object": "error", "message": ...}
  if body.object == "error" then
    raise_error(body)
  end
end

-- Text of a message content: a string, or (some compatible servers) a list of parts.
local function text_of(content)
  if type(content) == "string" then
    return content
  end
  if type(content) == "table" then
    local parts = {}
    for _, part in ipairs(content) do
      if type(part) == "table" and type(part.text) == "string" then
        parts[#parts + 1] = part.text
      end
    end
    return table.concat(parts)
  end
  return ""
end

-- Complete arguments (JSON text) → an object; see the header for `_raw`.
local function parse_arguments(args)
  if type(args) == "table" then
    return args
  end
  if type(args) ~= "string" or args:match("^%s*$") then
    return {}
  end
  local ok, parsed = pcall(json.decode, args)
  -- Objects decode to plain tables; arrays carry a metatable; null decodes to json.null.
  if ok and type(parsed) == "table" and getmetatable(parsed) == nil then
    return parsed
  end
  return { _raw = args }
end

local function usage_of(u)
  if type(u) ~= "table" then
    return nil
  end
  return {
    prompt = u.prompt_tokens or 0,
    completion = u.completion_tokens or 0,
    total = u.total_tokens or ((u.prompt_tokens or 0) + (u.completion_tokens or 0)),
  }
end

-- The body as a table; a body that is not JSON (a proxy's HTML error page) is an error
-- quoting its start.
local function decode_body(raw)
  local ok, body = pcall(json.decode, raw)
  if not ok or type(body) ~= "table" then
    error("response is not a JSON object: " .. string.sub(raw, 1, 200), 0)
  end
  return body
end

-- See the header: one distinct id per call of the history; results name their call.
local function distinct_ids(messages)
  local used = {}
  for _, msg in ipairs(messages) do
    for _, tc in ipairs(type(msg.tool_calls) == "table" and msg.tool_calls or {}) do
      if type(tc) == "table" and type(tc.id) == "string" then
        used[tc.id] = true
      end
    end
  end
  local function fresh(base)
    local n = 2
    while used[base .. "_" .. n] do
      n = n + 1
    end
    used[base .. "_" .. n] = true
    return base .. "_" .. n
  end
  -- sent: ids given to calls so far; latest: a call's id as given → as sent; open: the
  -- last assistant turn's calls not answered yet, in order: {id, made = it had no id}.
  local sent, latest, open, made = {}, {}, {}, 0
  -- The open call a result answers: the one with `id`; without one, the first that had
  -- no id, else the first.
  local function answer(id)
    local at
    for i, call in ipairs(open) do
      if (id ~= nil and call.id == id) or (id == nil and at == nil and call.made) then
        at = i
      end
    end
    if at == nil and id == nil and #open > 0 then
      at = 1
    end
    return at and table.remove(open, at).id or id
  end
  for _, msg in ipairs(messages) do
    if type(msg.tool_calls) == "table" and #msg.tool_calls > 0 then
      open = {}
      for _, tc in ipairs(msg.tool_calls) do
        if type(tc) == "table" then
          local given = type(tc.id) == "string" and tc.id or ""
          if given == "" then
            repeat
              made = made + 1
              tc.id = "call_hearth_" .. made
            until not used[tc.id]
            used[tc.id] = true
          elseif sent[given] then
            tc.id = fresh(given)
          end
          sent[tc.id], latest[given] = true, tc.id
          open[#open + 1] = { id = tc.id, made = given == "" }
        end
      end
    elseif msg.role == "tool" then
      local id = msg.tool_call_id
      if type(id) ~= "string" or id == "" then
        msg.tool_call_id = answer(nil)
      else
        msg.tool_call_id = answer(latest[id] or id)
      end
    end
  end
end

-- A normal end with tool calls is reported as `tool_calls` (see the header).
local function finish_with_calls(reason, has_calls)
  if has_calls and (reason == nil or reason == "" or reason == "stop") then
    return "tool_calls"
  end
  return reason
end

function adapter.transform_request(raw_json)
  local body = json.decode(raw_json)
  body.disable_thinking = nil

  if type(body.max_tokens) == "number" then
    body.max_tokens = math.tointeger(body.max_tokens) or body.max_tokens
  end

  if type(body.tools) == "table" and #body.tools == 0 then
    body.tools = nil
    body.tool_choice = nil
  end

  if type(body.messages) == "table" then
    distinct_ids(body.messages)
    for _, msg in ipairs(body.messages) do
      msg.reasoning_content = nil
      if type(msg.tool_calls) == "table" then
        if #msg.tool_calls == 0 then
          msg.tool_calls = nil
        else
          for _, tc in ipairs(msg.tool_calls) do
            tc.thought_signature = nil
            tc.type = tc.type or "function"
            local fn = tc["function"]
            if type(fn) == "table" and type(fn.arguments) ~= "string" then
              -- The wire wants JSON text; a caller may have handed an object.
              fn.arguments = json.encode(fn.arguments or {})
            end
          end
        end
      end
    end
  end

  if body.stream then
    body.stream_options = body.stream_options or { include_usage = true }
  end
  return json.encode(body)
end

function adapter.transform_response(raw_json)
  local body = decode_body(raw_json)
  check_error(body)
  local choice = body.choices and body.choices[1]
  if type(choice) ~= "table" then
    error("response has no choices", 0)
  end
  local message = choice.message or {}

  local tool_calls = {}
  for _, tc in ipairs(message.tool_calls or {}) do
    local fn = tc["function"] or {}
    tool_calls[#tool_calls + 1] = {
      id = type(tc.id) == "string" and tc.id or "",
      type = "function",
      name = fn.name or "",
      arguments = parse_arguments(fn.arguments),
    }
  end

  return json.encode({
    content = text_of(message.content),
    reasoning_content = text_of(message.reasoning_content or message.reasoning),
    finish_reason = finish_with_calls(choice.finish_reason, #tool_calls > 0) or "",
    token_usage = usage_of(body.usage),
    tool_calls = tool_calls,
  })
end

function adapter.transform_stream_chunk(raw_line)
  if raw_line == "[DONE]" then
    return ""
  end
  local chunk = decode_body(raw_line)
  check_error(chunk)

  local out = { content = "", reasoning_content = "", done = false }
  local useful = false

  local choice = chunk.choices and chunk.choices[1]
  if type(choice) == "table" then
    local delta = choice.delta or {}
    local content = text_of(delta.content)
    local reasoning = text_of(delta.reasoning_content or delta.reasoning)
    if content ~= "" or reasoning ~= "" then
      out.content, out.reasoning_content, useful = content, reasoning, true
    end

    local calls = {}
    for i, tc in ipairs(delta.tool_calls or {}) do
      local fn = tc["function"] or {}
      local args = fn.arguments
      if type(args) == "table" then
        args = json.encode(args)
      end
      calls[#calls + 1] = {
        index = tc.index or (i - 1),
        id = tc.id,
        name = fn.name,
        arguments = args or "",
      }
    end
    if #calls > 0 then
      out.tool_calls, useful = calls, true
    end

    if type(choice.finish_reason) == "string" and choice.finish_reason ~= "" then
      out.finish_reason = finish_with_calls(choice.finish_reason, #calls > 0)
      out.done, useful = true, true
    end
  end

  -- The final usage-only chunk (`choices: []`); Groq also puts it under `x_groq`.
  local usage = usage_of(chunk.usage) or usage_of(chunk.x_groq and chunk.x_groq.usage)
  if usage then
    out.token_usage, useful = usage, true
  end

  if not useful then
    return "" -- role-only or empty delta: nothing to pass on
  end
  return json.encode(out)
end

-- Sample payloads for `hearth adapters check openai` (shapes of the real API).
adapter.samples = {
  response = [[{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"(2+3)*4\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}]],
  stream = {
    [[{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}]],
    [[{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expr"}}]},"finish_reason":null}]}]],
    [[{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}]],
  },
}

return adapter
