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
-- * Tool-call arguments that are not a JSON object (the model can emit broken JSON) are
--   kept as `{"_raw": "<text>"}` rather than failing the whole turn: the tool loop's
--   schema check then sends the problem back to the model as that tool's error.
-- * An error body (`{"error": {...}}`, also inside a stream) raises a Lua error with the
--   API's message, type and code; a body that is not JSON, one quoting its start.

local adapter = {}

adapter.name = "openai"
adapter.version = "1.0.0"
adapter.endpoint = "/chat/completions"
adapter.headers = {}

-- The API's error object → one line.
local function api_error(err)
  if type(err) == "string" then
    return "API error: " .. err
  end
  if type(err) ~= "table" then
    return "API error"
  end
  local details = {}
  for _, key in ipairs({ "type", "code", "param" }) do
    local v = err[key]
    if type(v) == "string" or type(v) == "number" then
      details[#details + 1] = key .. " " .. tostring(v)
    end
  end
  local text = "API error: " .. tostring(err.message or "(no message)")
  if #details > 0 then
    text = text .. " (" .. table.concat(details, ", ") .. ")"
  end
  return text
end

local function check_error(body)
  if body.error ~= nil then
    error(api_error(body.error), 0)
  end
  -- Mistral-style: {"object": "error", "message": ...}
  if body.object == "error" then
    error(api_error(body), 0)
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
      id = tc.id or "",
      type = "function",
      name = fn.name or "",
      arguments = parse_arguments(fn.arguments),
    }
  end

  return json.encode({
    content = text_of(message.content),
    reasoning_content = text_of(message.reasoning_content or message.reasoning),
    finish_reason = choice.finish_reason or "",
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
      out.finish_reason, out.done, useful = choice.finish_reason, true, true
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
