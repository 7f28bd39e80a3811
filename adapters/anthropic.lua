-- Anthropic Messages API (`POST /v1/messages`), tool calls included.
--
-- Configuration: the source's base_url is the host WITHOUT `/v1`
-- (`https://api.anthropic.com`); the endpoint `/v1/messages` is appended to it.
-- Authentication: Anthropic wants the key in an `x-api-key` header, not
-- `Authorization: Bearer`. `adapter.auth_header = "x-api-key"` declares that; a broker that
-- reads it sends the source's key there instead of as a bearer token. `headers` carries the
-- required `anthropic-version`.
--
-- Choices made here:
-- * Request: every `system` message (wherever it stands) goes into the top-level `system`
--   text, joined by blank lines. Messages become content blocks: text parts → `text`
--   (empty text is dropped: the API rejects empty text blocks), `image_url` → `image`
--   (a `data:<mime>;base64,` URL → a base64 source, any other URL → a url source),
--   `audio_url` is dropped with a warning (no audio input), blocks already in Anthropic's
--   shape (`image`, `document`, …) pass through. Assistant `tool_calls` → `tool_use` blocks
--   whose `input` is the parsed arguments object (text that is not a JSON object is kept
--   as `{"_raw": "<text>"}`); `tool` messages → `tool_result` blocks in a user message.
--   Consecutive messages of one role are merged into one (the API wants alternating
--   turns), tool results first. Ids are made safe for the API (`[A-Za-z0-9_-]`) one to
--   one: letters, digits and `_` stay, `-` becomes `--`, any other byte `-` and two hex
--   digits (`a.1` → `a-2e1`, `a:1` → `a-3a1`), so different ids never become one. Each
--   tool_use of the request gets its own id: a call without an id gets
--   `toolu_hearth_<n>`, and an id already sent (a later turn repeating it) gets `-x<n>`
--   appended (never the output of the mapping); a tool result takes the id of the latest
--   earlier call it names, and one without `tool_call_id` the first call of the turn
--   before it not answered yet. A message left with no blocks is dropped.
-- * The messages' `reasoning_content` is dropped: replaying thinking needs the signed
--   `thinking` blocks, which the unified shape does not keep.
-- * `max_tokens` is required by the API: default 4096, sent as an integer. `temperature`
--   is clamped to the API's 0..1. `stop` → `stop_sequences`; `top_p`, `top_k`,
--   `stop_sequences`, `metadata`, `thinking` and `service_tier` pass through; the OpenAI
--   `user` becomes `metadata.user_id`; other extra keys are dropped (the API rejects
--   unknown fields), `disable_thinking` too (thinking is off unless `thinking` is given).
-- * Tools: `{type:"function", function:{name, description, parameters}}` →
--   `{name, description, input_schema}`; tools already in Anthropic's shape pass through.
--   `tool_choice`: "auto" → auto, "none" → none, "required" → any, a named function →
--   `{type:"tool", name}`; `parallel_tool_calls: false` → `disable_parallel_tool_use`.
--   An empty `tools` list is dropped, and `tool_choice` with it.
-- * Response: `text` blocks → content, `thinking` → reasoning_content, `tool_use` →
--   tool_calls {id, name, arguments = input}. stop_reason: end_turn/stop_sequence → stop,
--   tool_use → tool_calls, max_tokens → length, refusal → content_filter, other values as
--   they are; `stop` with tool calls → tool_calls. Usage: prompt = input + cache creation + cache read tokens.
-- * Stream: the content block index is the tool-call index (stable per call). A
--   `message_delta` without `input_tokens` (older API versions) reports prompt 0: the
--   adapter keeps no state between chunks (one VM serves concurrent streams).
-- * An error body (`{"type":"error","error":{...}}`, also as a stream event) is raised as
--   the API's typed error (`raise_api_error`: message, type, request id); a body that is
--   not JSON is a Lua error quoting its start.

local adapter = {}

adapter.name = "anthropic"
adapter.version = "1.0.0"
adapter.endpoint = "/v1/messages"
adapter.headers = { ["anthropic-version"] = "2023-06-01" }
adapter.auth_header = "x-api-key"

local DEFAULT_MAX_TOKENS = 4096

-- ------------------------------------------------------------------ helpers

local function is_array(t)
  return type(t) == "table" and getmetatable(t) ~= nil
end

local function is_object(t)
  return type(t) == "table" and getmetatable(t) == nil and t ~= json.null
end

-- An error body → raised as the API's typed error (`raise_api_error`): message, type and
-- request id. Inside a stream (after HTTP 200) there is no status: failover reads the type
-- (`overloaded_error`, `rate_limit_error`, `invalid_request_error`, …).
local function check_error(body)
  if body.type ~= "error" and body.error == nil then
    return
  end
  local err = body.error
  if type(err) == "string" then
    err = { message = err }
  elseif type(err) ~= "table" then
    err = {}
  end
  raise_api_error({
    type = type(err.type) == "string" and err.type or nil,
    message = type(err.message) == "string" and err.message or "(no message)",
    request_id = type(body.request_id) == "string" and body.request_id or nil,
  })
end

local function decode_body(raw)
  local ok, body = pcall(json.decode, raw)
  if not ok or not is_object(body) then
    error("response is not a JSON object: " .. string.sub(raw, 1, 200), 0)
  end
  return body
end

-- Complete arguments (JSON text or an object) → an object for `tool_use.input`.
local function parse_arguments(args)
  if is_object(args) then
    return args
  end
  if type(args) ~= "string" or args:match("^%s*$") then
    return {}
  end
  local ok, parsed = pcall(json.decode, args)
  if ok and is_object(parsed) then
    return parsed
  end
  return { _raw = args }
end

-- An id the API accepts (`^[a-zA-Z0-9_-]+$`), one to one (see the header); "" stays "".
local function safe_id(id)
  if type(id) ~= "string" then
    return ""
  end
  return (id:gsub("[^%w_]", function(c)
    if c == "-" then
      return "--"
    end
    return string.format("-%02x", c:byte())
  end))
end

local function usage_of(u)
  if not is_object(u) then
    return nil
  end
  local prompt = (u.input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    + (u.cache_read_input_tokens or 0)
  local completion = u.output_tokens or 0
  return {
    prompt = math.tointeger(prompt) or prompt,
    completion = math.tointeger(completion) or completion,
    total = math.tointeger(prompt + completion) or (prompt + completion),
  }
end

local FINISH = {
  end_turn = "stop",
  stop_sequence = "stop",
  tool_use = "tool_calls",
  max_tokens = "length",
  model_context_window_exceeded = "length",
  refusal = "content_filter",
}

local function finish_reason(stop_reason)
  if type(stop_reason) ~= "string" then
    return ""
  end
  return FINISH[stop_reason] or stop_reason
end

-- ------------------------------------------------------------------ request

-- Plain text of a content (a string or a list of parts), for `system`.
local function text_of(content)
  if type(content) == "string" then
    return content
  end
  if is_array(content) or (type(content) == "table" and #content > 0) then
    local parts = {}
    for _, part in ipairs(content) do
      if type(part) == "table" and type(part.text) == "string" then
        parts[#parts + 1] = part.text
      end
    end
    return table.concat(parts, "\n")
  end
  return ""
end

local function image_block(part)
  local image = part.image_url
  local url = type(image) == "table" and image.url or image
  if type(url) ~= "string" or url == "" then
    return nil
  end
  local mime, data = url:match("^data:([^;,]+);base64,(.*)$")
  if mime then
    return { type = "image", source = { type = "base64", media_type = mime, data = data } }
  end
  return { type = "image", source = { type = "url", url = url } }
end

-- A message content → a list of Anthropic blocks (appended to `out`).
local function content_blocks(content, out)
  if type(content) == "string" then
    if content ~= "" then
      out[#out + 1] = { type = "text", text = content }
    end
    return out
  end
  if type(content) ~= "table" then
    return out
  end
  for _, part in ipairs(content) do
    if type(part) == "string" then
      if part ~= "" then
        out[#out + 1] = { type = "text", text = part }
      end
    elseif is_object(part) then
      local kind = part.type
      if kind == "text" or (kind == nil and type(part.text) == "string") then
        if type(part.text) == "string" and part.text ~= "" then
          out[#out + 1] = { type = "text", text = part.text, cache_control = part.cache_control }
        end
      elseif kind == "image_url" then
        local block = image_block(part)
        if block then
          out[#out + 1] = block
        end
      elseif kind == "audio_url" or kind == "input_audio" then
        log("warn", "anthropic: audio content is not supported, dropped")
      elseif type(kind) == "string" then
        out[#out + 1] = part -- already an Anthropic block (image, document, …)
      end
    end
  end
  return out
end

local function convert_tools(tools)
  local out = {}
  for _, tool in ipairs(tools) do
    local fn = type(tool) == "table" and tool["function"]
    if is_object(fn) then
      local schema = fn.parameters
      if not is_object(schema) then
        schema = { type = "object", properties = {} }
      end
      out[#out + 1] = {
        name = fn.name,
        description = fn.description,
        input_schema = schema,
      }
    elseif type(tool) == "table" then
      out[#out + 1] = tool -- Anthropic shape (input_schema, or a server tool)
    end
  end
  return out
end

local function convert_tool_choice(choice, parallel)
  local out
  if choice == "auto" then
    out = { type = "auto" }
  elseif choice == "none" then
    out = { type = "none" }
  elseif choice == "required" or choice == "any" then
    out = { type = "any" }
  elseif is_object(choice) then
    local fn = choice["function"]
    if is_object(fn) and type(fn.name) == "string" then
      out = { type = "tool", name = fn.name }
    elseif type(choice.type) == "string" and choice.type ~= "function" then
      out = choice -- Anthropic shape
    end
  end
  if parallel == false then
    out = out or { type = "auto" }
    if out.type ~= "none" then
      out.disable_parallel_tool_use = true
    end
  end
  return out
end

function adapter.transform_request(raw_json)
  local req = json.decode(raw_json)
  local body = {
    model = req.model,
    messages = json.array(),
  }

  local max_tokens = req.max_tokens
  if type(max_tokens) ~= "number" or max_tokens <= 0 then
    max_tokens = DEFAULT_MAX_TOKENS
  end
  body.max_tokens = math.tointeger(max_tokens) or math.floor(max_tokens)

  if type(req.temperature) == "number" then
    body.temperature = math.max(0, math.min(1, req.temperature))
  end
  if req.stream == true then
    body.stream = true
  end
  for _, key in ipairs({ "top_p", "top_k", "metadata", "thinking", "service_tier", "stop_sequences" }) do
    if req[key] ~= nil then
      body[key] = req[key]
    end
  end
  if body.stop_sequences == nil and req.stop ~= nil then
    body.stop_sequences = type(req.stop) == "string" and { req.stop } or req.stop
  end
  if type(req.user) == "string" and req.user ~= "" then
    body.metadata = is_object(body.metadata) and body.metadata or {}
    body.metadata.user_id = body.metadata.user_id or req.user
  end

  -- Messages: (role, blocks) turns, merged by role.
  local system = {}
  local turns = {}
  -- Tool-use ids (see the header): `taken` = sent so far; `latest` = a call's id as given
  -- → the id sent for its latest call; `open` = the last assistant turn's calls not
  -- answered yet, in order: {id, made = it had no id}.
  local taken, latest, open = {}, {}, {}
  local synthesized = 0
  local function unique(id)
    local out, n = id, 1
    while taken[out] do
      n = n + 1
      out = id .. "-x" .. n
    end
    taken[out] = true
    return out
  end
  -- The id a result answers: `id` (taken off the open calls); without one, the first open
  -- call that had none, else the first open call.
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
    return at and table.remove(open, at).id or id or ""
  end

  local function push(role, blocks)
    if #blocks == 0 then
      return
    end
    local last = turns[#turns]
    if last and last.role == role then
      for _, b in ipairs(blocks) do
        last.blocks[#last.blocks + 1] = b
      end
    else
      turns[#turns + 1] = { role = role, blocks = blocks }
    end
  end

  for _, msg in ipairs(req.messages or {}) do
    local role = msg.role
    if role == "system" or role == "developer" then
      local text = text_of(msg.content)
      if text ~= "" then
        system[#system + 1] = text
      end
    elseif role == "assistant" then
      local blocks = content_blocks(msg.content, {})
      if type(msg.tool_calls) == "table" and #msg.tool_calls > 0 then
        open = {}
        for _, tc in ipairs(msg.tool_calls) do
          local fn = tc["function"] or {}
          local id
          local made = type(tc.id) ~= "string" or tc.id == ""
          if made then
            synthesized = synthesized + 1
            id = unique("toolu_hearth_" .. synthesized)
          else
            id = unique(safe_id(tc.id))
            latest[tc.id] = id
          end
          open[#open + 1] = { id = id, made = made }
          blocks[#blocks + 1] = {
            type = "tool_use",
            id = id,
            name = fn.name or tc.name or "",
            input = parse_arguments(fn.arguments or tc.arguments),
          }
        end
      end
      push("assistant", blocks)
    elseif role == "tool" then
      local given = msg.tool_call_id
      local id
      if type(given) == "string" and given ~= "" then
        id = answer(latest[given] or safe_id(given))
      else
        id = answer(nil)
      end
      local result = { type = "tool_result", tool_use_id = id }
      if type(msg.content) == "string" then
        if msg.content ~= "" then
          result.content = msg.content
        end
      elseif type(msg.content) == "table" then
        local blocks = content_blocks(msg.content, {})
        if #blocks > 0 then
          result.content = blocks
        end
      end
      if msg.is_error == true then
        result.is_error = true
      end
      push("user", { result })
    else -- user (and anything unknown)
      push("user", content_blocks(msg.content, {}))
    end
  end

  for _, turn in ipairs(turns) do
    local blocks = turn.blocks
    if turn.role == "user" then
      -- tool_result blocks must come first in their user message.
      local results, rest = {}, {}
      for _, b in ipairs(blocks) do
        if b.type == "tool_result" then
          results[#results + 1] = b
        else
          rest[#rest + 1] = b
        end
      end
      for _, b in ipairs(rest) do
        results[#results + 1] = b
      end
      blocks = results
    end
    local content = blocks
    if #blocks == 1 and blocks[1].type == "text" and blocks[1].cache_control == nil then
      content = blocks[1].text
    end
    body.messages[#body.messages + 1] = { role = turn.role, content = content }
  end

  if #system > 0 then
    body.system = table.concat(system, "\n\n")
  end

  if type(req.tools) == "table" and #req.tools > 0 then
    body.tools = convert_tools(req.tools)
    body.tool_choice = convert_tool_choice(req.tool_choice, req.parallel_tool_calls)
  end

  return json.encode(body)
end

-- ------------------------------------------------------------------ response

function adapter.transform_response(raw_json)
  local body = decode_body(raw_json)
  check_error(body)
  if type(body.content) ~= "table" then
    error("response has no content", 0)
  end

  local text, reasoning, tool_calls = {}, {}, json.array()
  for _, block in ipairs(body.content) do
    if block.type == "text" and type(block.text) == "string" then
      text[#text + 1] = block.text
    elseif block.type == "thinking" and type(block.thinking) == "string" then
      reasoning[#reasoning + 1] = block.thinking
    elseif block.type == "tool_use" then
      tool_calls[#tool_calls + 1] = {
        id = block.id or "",
        type = "function",
        name = block.name or "",
        arguments = parse_arguments(block.input),
      }
    end
  end

  return json.encode({
    content = table.concat(text),
    reasoning_content = table.concat(reasoning),
    finish_reason = (#tool_calls > 0 and finish_reason(body.stop_reason) == "stop") and "tool_calls"
      or finish_reason(body.stop_reason),
    token_usage = usage_of(body.usage),
    tool_calls = tool_calls,
  })
end

-- ------------------------------------------------------------------ stream

function adapter.transform_stream_chunk(raw_line)
  if raw_line == "[DONE]" then
    return ""
  end
  local event = decode_body(raw_line)
  check_error(event)
  local kind = event.type

  if kind == "message_start" then
    local usage = usage_of(event.message and event.message.usage)
    if usage then
      return json.encode({ content = "", token_usage = usage })
    end
    return ""
  elseif kind == "content_block_start" then
    local block = event.content_block or {}
    local index = event.index or 0
    if block.type == "tool_use" then
      local args = ""
      -- Normally `input` is `{}` and the arguments follow as deltas; a non-empty one is
      -- the whole input.
      if is_object(block.input) and next(block.input) ~= nil then
        args = json.encode(block.input)
      end
      return json.encode({
        content = "",
        tool_calls = { { index = index, id = block.id or "", name = block.name or "", arguments = args } },
      })
    elseif block.type == "text" and type(block.text) == "string" and block.text ~= "" then
      return json.encode({ content = block.text })
    elseif block.type == "thinking" and type(block.thinking) == "string" and block.thinking ~= "" then
      return json.encode({ content = "", reasoning_content = block.thinking })
    end
    return ""
  elseif kind == "content_block_delta" then
    local delta = event.delta or {}
    if delta.type == "text_delta" and type(delta.text) == "string" and delta.text ~= "" then
      return json.encode({ content = delta.text })
    elseif delta.type == "thinking_delta" and type(delta.thinking) == "string" and delta.thinking ~= "" then
      return json.encode({ content = "", reasoning_content = delta.thinking })
    elseif delta.type == "input_json_delta" and type(delta.partial_json) == "string"
      and delta.partial_json ~= "" then
      return json.encode({
        content = "",
        tool_calls = { { index = event.index or 0, arguments = delta.partial_json } },
      })
    end
    return "" -- signature_delta, citations_delta, empty fragments
  elseif kind == "message_delta" then
    local out = { content = "" }
    local delta = event.delta or {}
    if type(delta.stop_reason) == "string" then
      out.finish_reason = finish_reason(delta.stop_reason)
      out.done = true
    end
    out.token_usage = usage_of(event.usage)
    if out.finish_reason == nil and out.token_usage == nil then
      return ""
    end
    return json.encode(out)
  elseif kind == "message_stop" then
    return json.encode({ content = "", done = true })
  end
  return "" -- ping, content_block_stop, unknown events
end

return adapter
