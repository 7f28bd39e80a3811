-- Google Gemini generateContent (the Gemini API, "AI Studio"), tool calls included.
--
-- Endpoints: `base_url` is the API host, `https://generativelanguage.googleapis.com`; the
-- broker replaces `{model}` with the source's model. A plain request goes to `endpoint`
-- (`:generateContent`, one JSON body); a streamed one to `stream_endpoint`
-- (`:streamGenerateContent?alt=sse`: SSE whose every `data:` is a whole
-- GenerateContentResponse fragment; no `[DONE]`, the stream just ends).
--
-- Authentication: the Gemini API takes the key as the `x-goog-api-key: <key>` header (or
-- `?key=<key>` in the URL). It does NOT take an API key as `Authorization: Bearer`: that
-- header must carry an OAuth access token (Vertex AI). `auth_header` below names the header
-- the broker must put the source's key in; `headers` carries no key.
--
-- Request (unified CompletionRequest → GenerateContentRequest):
-- * system messages → `systemInstruction.parts` (all of them, in order).
-- * user → role `user`, assistant → role `model`; `contents[].parts[]`: `text`; image /
--   audio `data:` URLs → `inlineData {mimeType, data}`, other URLs → `fileData {fileUri}`.
-- * assistant `tool_calls` → `functionCall {name, args}` parts after the text (arguments
--   JSON text is decoded to an object; text that is not a JSON object is sent as
--   `{"_raw": text}`). An id that is not one of ours (the broker's `call_hearth_…`, the
--   older `call_<n>`) is sent as `id`.
-- * thought signatures: Gemini 3 rejects (400) a request whose current-turn function calls
--   lack the `thoughtSignature` it returned. A signature found on the unified tool call
--   (`thought_signature`, `thoughtSignature`, or OpenAI-compat Gemini's
--   `extra_content.google.thought_signature`) or on the assistant message
--   (`thought_signature`, for its first call) is sent back on that `functionCall` part;
--   the broker keeps the signature this adapter returned on the assistant message's tool
--   call. When a model step of the current turn (after the last real user message) has
--   none (history written by another source or client), the first call gets Google's
--   documented placeholder `skip_thought_signature_validator`.
-- * tool messages → `functionResponse {name, response}` parts of one `user` turn
--   (consecutive tool messages merged, in order). The name comes from the latest earlier
--   assistant tool call with that `tool_call_id` (else the message's own `name`; else,
--   for a result without an id or with one no call has, the first call of the assistant
--   turn before it not answered yet; else an error). `response`: the content if it is JSON text of an object, else
--   `{"result": content}`.
-- * messages' `reasoning_content` is dropped (Gemini gets its reasoning back through the
--   signatures); a message with no parts left is dropped (Gemini rejects empty parts).
-- * tools → `tools: [{functionDeclarations: [{name, description, parameters}]}]`.
--   `parameters` is reduced to the OpenAPI subset Gemini's `Schema` accepts: local `$ref`s
--   (`#/$defs/…`, `#/definitions/…`) are inlined (8 levels deep at most), `allOf` merged,
--   `oneOf` read as `anyOf`, `const` → a one-value `enum`, `type: [T, "null"]` → `type: T,
--   nullable: true`; `format` kept only where Gemini allows it (string `date-time`/`enum`,
--   number `int32`/`int64`/`float`/`double`); a non-string `enum` moves into the
--   description ("One of: 1, 2, 3.") with the type it implies; `required`
--   filtered to declared properties; every other key (`$schema`, `$id`, `$defs`,
--   `additionalProperties`, `examples`, `patternProperties`, `not`, `if`, `multipleOf`,
--   `exclusiveMinimum`, `uniqueItems`, …) dropped. An object schema with no properties
--   loses `properties` (Gemini rejects an empty one); a tool without parameters sends none.
-- * `tool_choice`: "auto"/"none"/"required" → `toolConfig.functionCallingConfig.mode`
--   AUTO/NONE/ANY; `{function: {name}}` → ANY with `allowedFunctionNames`.
-- * `temperature`, `max_tokens` (→ `maxOutputTokens`, an integer), `top_p`, `stop` →
--   `generationConfig`. Extra top-level keys that are Gemini's own (`generationConfig`,
--   merged over the above; `safetySettings`, `toolConfig`, `cachedContent`, `labels`) pass
--   through; any other extra key, `model`, `stream` and `disable_thinking` are dropped
--   (thinking is configured with `generationConfig.thinkingConfig`, which differs per
--   model generation).
--
-- Response (GenerateContentResponse → unified):
-- * `candidates[0].content.parts`: `text` → content, `text` with `thought: true` →
--   reasoning_content, `functionCall` → tool_calls `{id, name, arguments,
--   thought_signature}`. A call's id is `functionCall.id` when present, else empty: the
--   broker makes up one unique in the conversation (`call_hearth_…`, not sent back).
-- * finishReason: STOP with tool calls → `tool_calls`, STOP → `stop`, MAX_TOKENS →
--   `length`, SAFETY/RECITATION/BLOCKLIST/PROHIBITED_CONTENT/SPII/IMAGE_SAFETY →
--   `content_filter`, any other → lower-cased (`malformed_function_call`, `other`).
-- * usageMetadata → token_usage: prompt = promptTokenCount, completion =
--   candidatesTokenCount + thoughtsTokenCount, total = totalTokenCount (as reported).
-- * an error body (`{"error": {code, message, status, details}}`, also as a one-element
--   array, also inside a stream) → the API's typed error (`raise_api_error`: HTTP status
--   `code`, type `status`, message, RetryInfo delay); a prompt blocked with no candidates
--   → an error naming the reason; a body that is not JSON → an error quoting its start.
--
-- Stream: each `data:` is handled like a response, but calls are numbered across the
-- stream. A whole `functionCall` becomes one complete tool-call delta (id, name and the
-- whole arguments JSON). Vertex's streamed arguments (`functionCall {name, willContinue:
-- true}`, then `partialArgs [{jsonPath, stringValue|numberValue|boolValue|nullValue}]`,
-- closed by a `functionCall` without `willContinue`) are put together here and sent as one
-- complete delta when the call closes (or at finishReason). That needs state across
-- chunks: it is kept per `responseId` (so streams sharing this adapter do not mix), dropped
-- at finishReason, at most 32 streams kept. finishReason → `done` + finish_reason;
-- usageMetadata with counts → token_usage (Gemini repeats it on every chunk; the last
-- wins).

local adapter = {}

adapter.name = "gemini"
adapter.version = "1.0.0"
adapter.endpoint = "/v1beta/models/{model}:generateContent"
adapter.stream_endpoint = "/v1beta/models/{model}:streamGenerateContent?alt=sse"
adapter.headers = {}
-- Not read by the broker yet: where the source's key must go (see the header).
adapter.auth_header = "x-goog-api-key"

local SKIP_SIGNATURE = "skip_thought_signature_validator"

---------------------------------------------------------------- helpers

local function is_object(v)
  return type(v) == "table" and getmetatable(v) == nil
end

local function is_array(v)
  return type(v) == "table" and getmetatable(v) ~= nil
end

local function nonempty_string(v)
  return type(v) == "string" and v ~= ""
end

-- Text of a content: a string, or the text parts of a list.
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

local function as_integer(v)
  if type(v) == "number" then
    return math.tointeger(v) or math.floor(v)
  end
  return nil
end

---------------------------------------------------------------- errors

-- Google's error object → raised as the API's typed error (`raise_api_error`): `code` is
-- the HTTP status, `status` the type (`RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`), a
-- RetryInfo `retryDelay` ("34.4s") the time to wait.
local function raise_error(err)
  if type(err) ~= "table" then
    raise_api_error({ message = tostring(err) })
  end
  local retry
  if type(err.details) == "table" then
    for _, d in ipairs(err.details) do
      if type(d) == "table" and type(d.retryDelay) == "string" then
        retry = tonumber(d.retryDelay:match("^%s*([%d%.]+)s%s*$"))
      end
    end
  end
  raise_api_error({
    status = type(err.code) == "number" and err.code or nil,
    type = nonempty_string(err.status) and err.status or nil,
    message = type(err.message) == "string" and err.message or "(no message)",
    retry_after = retry,
  })
end

-- The body as a table; errors raised here.
local function decode_body(raw)
  local ok, body = pcall(json.decode, raw)
  if not ok or type(body) ~= "table" then
    error("response is not JSON: " .. string.sub(raw, 1, 200), 0)
  end
  -- Errors of the non-SSE stream come as a one-element array.
  if is_array(body) and type(body[1]) == "table" and body[1].error ~= nil then
    body = body[1]
  end
  if body.error ~= nil then
    raise_error(body.error)
  end
  return body
end

---------------------------------------------------------------- schemas

local ALLOWED_FORMATS = {
  string = { ["date-time"] = true, enum = true },
  number = { float = true, double = true },
  integer = { int32 = true, int64 = true },
}

-- How many `$ref`s may be followed one inside another (recursive schemas end there).
local MAX_REF_HOPS = 8

local function resolve_ref(ref, root)
  if type(ref) ~= "string" then
    return nil
  end
  local name = ref:match("^#/%$defs/(.+)$")
  local defs = root["$defs"]
  if not name then
    name = ref:match("^#/definitions/(.+)$")
    defs = root.definitions
  end
  if name and type(defs) == "table" then
    return defs[name]
  end
  return nil
end

-- Copies into `into` the keys of `from` it lacks; `properties` and `required` are united.
-- `into`'s own tables are not modified (they may belong to the caller's request).
local function merge_missing(into, from)
  for k, v in pairs(from) do
    if into[k] == nil then
      into[k] = v
    elseif k == "properties" and is_object(into[k]) and is_object(v) then
      local props = {}
      for pk, pv in pairs(v) do
        props[pk] = pv
      end
      for pk, pv in pairs(into[k]) do
        props[pk] = pv
      end
      into[k] = props
    elseif k == "required" and type(into[k]) == "table" and type(v) == "table" then
      local merged = json.array()
      for _, r in ipairs(into[k]) do
        merged[#merged + 1] = r
      end
      for _, r in ipairs(v) do
        merged[#merged + 1] = r
      end
      into[k] = merged
    end
  end
end

local clean_schema

local function clean_list(list, root, hops)
  local out = json.array()
  if type(list) ~= "table" then
    return out
  end
  for _, s in ipairs(list) do
    local c = clean_schema(s, root, hops)
    if c then
      out[#out + 1] = c
    end
  end
  return out
end

-- A JSON Schema → the subset Gemini's `Schema` takes (see the header); nil if not a schema.
function clean_schema(s, root, hops)
  if not is_object(s) then
    return nil
  end
  if s["$ref"] ~= nil then
    local merged = {}
    for k, v in pairs(s) do
      if k ~= "$ref" then
        merged[k] = v
      end
    end
    local target = hops < MAX_REF_HOPS and resolve_ref(s["$ref"], root) or nil
    if is_object(target) then
      merge_missing(merged, target) -- the siblings of `$ref` win
    elseif merged.type == nil then
      merged.type = "object" -- too deep, or not a local `$ref`: an open object
    end
    return clean_schema(merged, root, hops + 1)
  end

  local out = {}
  local t = s.type
  if type(t) == "table" then -- ["string", "null"]
    local chosen
    for _, name in ipairs(t) do
      if name == "null" then
        out.nullable = true
      elseif chosen == nil then
        chosen = name
      end
    end
    t = chosen
  end
  if t == "null" then
    out.nullable = true
  elseif type(t) == "string" then
    out.type = t
  end
  for _, key in ipairs({ "title", "description", "pattern", "example", "default" }) do
    if s[key] ~= nil then
      out[key] = s[key]
    end
  end
  for _, key in ipairs({
    "minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties",
    "minimum", "maximum",
  }) do
    if type(s[key]) == "number" then
      out[key] = s[key]
    end
  end
  if s.nullable == true then
    out.nullable = true
  end
  local formats = ALLOWED_FORMATS[out.type or ""]
  if type(s.format) == "string" and formats and formats[s.format] then
    out.format = s.format
  end

  local enum = s.enum
  if s.const ~= nil and enum == nil then
    enum = { s.const }
  end
  if type(enum) == "table" then
    local values, all_strings = json.array(), true
    for _, v in ipairs(enum) do
      if type(v) == "string" then
        values[#values + 1] = v
      elseif v ~= json.null then
        all_strings = false
      end
    end
    if all_strings and #values > 0 then
      out.enum = values
      out.type = out.type or "string"
    elseif not all_strings then
      -- Gemini takes string enums only: keep the values in the description, and a type.
      local shown, kind = {}, nil
      for _, v in ipairs(enum) do
        shown[#shown + 1] = v == json.null and "null" or json.encode(v)
        if v ~= json.null then
          local k = math.type(v) == "integer" and "integer" or type(v)
          if (k == "number" and (kind == nil or kind == "integer"))
            or (k == "integer" and kind == "number") then
            kind = "number"
          elseif kind == nil or kind == k then
            kind = k
          else
            kind = "mixed"
          end
        end
      end
      if out.type == nil and (kind == "integer" or kind == "number" or kind == "boolean") then
        out.type = kind
      end
      local note = "One of: " .. table.concat(shown, ", ") .. "."
      out.description = type(out.description) == "string" and (out.description .. " " .. note)
        or note
    end
  end

  if is_object(s.properties) then
    local props, count = {}, 0
    for name, sub in pairs(s.properties) do
      local c = clean_schema(sub, root, hops)
      if c then
        props[name] = c
        count = count + 1
      end
    end
    if count > 0 then
      out.properties = props
      out.type = out.type or "object"
      if type(s.required) == "table" then
        local required = json.array()
        for _, r in ipairs(s.required) do
          if type(r) == "string" and props[r] ~= nil then
            required[#required + 1] = r
          end
        end
        if #required > 0 then
          out.required = required
        end
      end
      if type(s.propertyOrdering) == "table" then
        out.propertyOrdering = s.propertyOrdering
      end
    end
  end
  if s.items ~= nil then
    local items = clean_schema(s.items, root, hops)
    if items then
      out.items = items
    end
    out.type = out.type or "array"
  end
  local any = s.anyOf or s.oneOf
  if type(any) == "table" then
    -- `anyOf: [X, {type: "null"}]` (pydantic's Optional[X]) → X, nullable.
    local kept = json.array()
    for _, sub in ipairs(clean_list(any, root, hops)) do
      if sub.type == nil and sub.nullable == true and sub.properties == nil and sub.anyOf == nil then
        out.nullable = true
      else
        kept[#kept + 1] = sub
      end
    end
    if #kept == 1 then
      merge_missing(out, kept[1])
    elseif #kept > 1 then
      out.anyOf = kept
    end
  end
  if type(s.allOf) == "table" then
    for _, sub in ipairs(clean_list(s.allOf, root, hops)) do
      merge_missing(out, sub)
    end
  end
  return out
end

-- A tool's parameters → Gemini `parameters`, or nil when the tool takes none.
local function parameters_of(schema)
  local out = clean_schema(schema, is_object(schema) and schema or {}, 0)
  if out == nil or (out.properties == nil and out.anyOf == nil and (out.type == nil or out.type == "object")) then
    return nil
  end
  return out
end

---------------------------------------------------------------- stream state

-- Per-stream state (see the header): responseId ("" when a chunk has none) → state.
local MAX_STREAMS = 32
local streams, stream_order = {}, {}

local function forget_stream(key)
  streams[key] = nil
  for i, k in ipairs(stream_order) do
    if k == key then
      table.remove(stream_order, i)
      break
    end
  end
end

local function stream_state(key)
  local s = streams[key]
  if s == nil then
    s = { next_index = 0, pending = nil }
    streams[key] = s
    stream_order[#stream_order + 1] = key
    if #stream_order > MAX_STREAMS then
      streams[table.remove(stream_order, 1)] = nil
    end
  end
  return s
end

---------------------------------------------------------------- request

local MIME_BY_EXTENSION = {
  png = "image/png", jpg = "image/jpeg", jpeg = "image/jpeg", gif = "image/gif",
  webp = "image/webp", heic = "image/heic", heif = "image/heif", pdf = "application/pdf",
  mp3 = "audio/mp3", wav = "audio/wav", ogg = "audio/ogg", flac = "audio/flac",
  aac = "audio/aac",
}

-- An image/audio URL → an inlineData or fileData part.
local function media_part(url)
  if type(url) ~= "string" or url == "" then
    return nil
  end
  local mime, data = url:match("^data:([^;,]+);base64,(.*)$")
  if mime then
    return { inlineData = { mimeType = mime, data = data } }
  end
  local ext = url:match("%.(%w+)[?#]?[^/]*$")
  local part = { fileData = { fileUri = url } }
  if ext and MIME_BY_EXTENSION[ext:lower()] then
    part.fileData.mimeType = MIME_BY_EXTENSION[ext:lower()]
  end
  return part
end

-- A user message's content → parts.
local function user_parts(content)
  local parts = {}
  if type(content) == "string" then
    if content ~= "" then
      parts[1] = { text = content }
    end
    return parts
  end
  if type(content) ~= "table" then
    return parts
  end
  for _, block in ipairs(content) do
    if type(block) == "string" then
      if block ~= "" then
        parts[#parts + 1] = { text = block }
      end
    elseif type(block) == "table" then
      local kind = block.type
      if (kind == "text" or kind == nil) and type(block.text) == "string" then
        if block.text ~= "" then
          parts[#parts + 1] = { text = block.text }
        end
      elseif kind == "image_url" or kind == "audio_url" then
        local ref = block[kind]
        local url = type(ref) == "table" and ref.url or ref
        local part = media_part(url)
        if part then
          parts[#parts + 1] = part
        end
      end
    end
  end
  return parts
end

local function signature_of(tc)
  if type(tc) ~= "table" then
    return nil
  end
  local fn = tc["function"]
  local extra = tc.extra_content
  local candidates = {
    tc.thought_signature,
    tc.thoughtSignature,
    type(fn) == "table" and fn.thought_signature or nil,
    type(extra) == "table" and type(extra.google) == "table" and extra.google.thought_signature
      or nil,
  }
  for i = 1, 4 do
    if nonempty_string(candidates[i]) then
      return candidates[i]
    end
  end
  return nil
end

local function arguments_object(args)
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

-- Tool result text → the `response` object.
local function response_object(content)
  local text = text_of(content)
  local ok, parsed = pcall(json.decode, text)
  if ok and is_object(parsed) then
    return parsed
  end
  return { result = text }
end

local function is_our_id(id)
  return type(id) ~= "string" or id == "" or id:match("^call_%d+$") ~= nil
    or id:sub(1, 12) == "call_hearth_"
end

local function generation_config(body)
  local config = {}
  if type(body.temperature) == "number" then
    config.temperature = body.temperature
  end
  local max_tokens = as_integer(body.max_tokens or body.max_completion_tokens)
  if max_tokens and max_tokens > 0 then
    config.maxOutputTokens = max_tokens
  end
  if type(body.top_p) == "number" then
    config.topP = body.top_p
  end
  if type(body.stop) == "string" then
    config.stopSequences = json.array({ body.stop })
  elseif type(body.stop) == "table" and #body.stop > 0 then
    config.stopSequences = body.stop
  end
  if is_object(body.generationConfig) then
    for k, v in pairs(body.generationConfig) do
      config[k] = v
    end
  end
  if next(config) == nil then
    return nil
  end
  return config
end

local function tool_config(choice)
  local mode, names
  if choice == "auto" then
    mode = "AUTO"
  elseif choice == "none" then
    mode = "NONE"
  elseif choice == "required" or choice == "any" then
    mode = "ANY"
  elseif type(choice) == "table" then
    local fn = choice["function"]
    if type(fn) == "table" and nonempty_string(fn.name) then
      mode, names = "ANY", json.array({ fn.name })
    end
  end
  if mode == nil then
    return nil
  end
  return { functionCallingConfig = { mode = mode, allowedFunctionNames = names } }
end

local function declarations(tools)
  local list = json.array()
  if type(tools) ~= "table" then
    return list
  end
  for _, tool in ipairs(tools) do
    local fn = type(tool) == "table" and (tool["function"] or tool) or nil
    if type(fn) == "table" and nonempty_string(fn.name) then
      local decl = { name = fn.name }
      if nonempty_string(fn.description) then
        decl.description = fn.description
      end
      decl.parameters = parameters_of(fn.parameters)
      list[#list + 1] = decl
    end
  end
  return list
end

-- Marks the first function call of every model step of the current turn that carries no
-- signature (see the header). `contents` are the request's, in order.
local function ensure_signatures(contents)
  local start = 1
  for i, c in ipairs(contents) do
    if c.role == "user" then
      for _, p in ipairs(c.parts) do
        if p.functionResponse == nil then
          start = i + 1
          break
        end
      end
    end
  end
  for i = start, #contents do
    local c = contents[i]
    if c.role == "model" then
      local first, signed
      for _, p in ipairs(c.parts) do
        if p.functionCall ~= nil then
          first = first or p
          signed = signed or p.thoughtSignature ~= nil
        end
      end
      if first and not signed then
        first.thoughtSignature = SKIP_SIGNATURE
      end
    end
  end
end

local PASSTHROUGH = { safetySettings = true, toolConfig = true, cachedContent = true, labels = true }

function adapter.transform_request(raw_json)
  local body = json.decode(raw_json)
  if body.stream then
    forget_stream("") -- a new stream without responseIds starts clean
  end

  local out = {}
  local system = json.array()
  local contents = json.array()
  local names_by_id = {}
  local open = {} -- the last assistant turn's calls not answered yet: {id, name}, in order
  local pending_tool -- the user content collecting consecutive tool results

  for _, msg in ipairs(body.messages or {}) do
    local role = msg.role
    if role ~= "tool" then
      pending_tool = nil
    end
    if role == "system" or role == "developer" then
      local text = text_of(msg.content)
      if text ~= "" then
        system[#system + 1] = { text = text }
      end
    elseif role == "assistant" or role == "model" then
      local parts = {}
      local text = text_of(msg.content)
      if text ~= "" then
        parts[1] = { text = text }
      end
      local message_signature = nonempty_string(msg.thought_signature) and msg.thought_signature
        or nil
      if type(msg.tool_calls) == "table" and #msg.tool_calls > 0 then
        open = {}
      end
      for i, tc in ipairs(type(msg.tool_calls) == "table" and msg.tool_calls or {}) do
        local fn = type(tc["function"]) == "table" and tc["function"] or tc
        local name = fn.name or ""
        local call = { name = name, args = arguments_object(fn.arguments) }
        if not is_our_id(tc.id) then
          call.id = tc.id
        end
        if nonempty_string(tc.id) then
          names_by_id[tc.id] = name
        end
        open[#open + 1] = { id = tc.id, name = name }
        local part = { functionCall = call }
        part.thoughtSignature = signature_of(tc) or (i == 1 and message_signature or nil)
        parts[#parts + 1] = part
      end
      if #parts > 0 then
        contents[#contents + 1] = { role = "model", parts = parts }
      end
    elseif role == "tool" or role == "function" then
      local id = msg.tool_call_id
      local name = (nonempty_string(id) and names_by_id[id]) or msg.name
      -- The open call this result answers: by id, else by name, else the first call
      -- without an id, else the first.
      local answered
      for i, call in ipairs(open) do
        if answered == nil and nonempty_string(id) and call.id == id then
          answered = i
        end
      end
      for i, call in ipairs(open) do
        if answered == nil and nonempty_string(name) and call.name == name then
          answered = i
        end
      end
      for i, call in ipairs(open) do
        if answered == nil and not nonempty_string(name) and not nonempty_string(call.id) then
          answered = i
        end
      end
      if answered == nil and not nonempty_string(name) and #open > 0 then
        answered = 1
      end
      if answered then
        name = nonempty_string(name) and name or open[answered].name
        table.remove(open, answered)
      end
      if not nonempty_string(name) then
        error("tool message " .. tostring(id) .. ": no earlier assistant tool call has this id", 0)
      end
      local fr = { name = name, response = response_object(msg.content) }
      if not is_our_id(id) then
        fr.id = id
      end
      if pending_tool == nil then
        pending_tool = { role = "user", parts = {} }
        contents[#contents + 1] = pending_tool
      end
      pending_tool.parts[#pending_tool.parts + 1] = { functionResponse = fr }
    else -- user and anything else
      local parts = user_parts(msg.content)
      if #parts > 0 then
        contents[#contents + 1] = { role = "user", parts = parts }
      end
    end
  end
  ensure_signatures(contents)

  out.contents = contents
  if #system > 0 then
    out.systemInstruction = { parts = system }
  end
  local decls = declarations(body.tools)
  if #decls > 0 then
    out.tools = json.array({ { functionDeclarations = decls } })
    out.toolConfig = tool_config(body.tool_choice)
  end
  out.generationConfig = generation_config(body)
  for key in pairs(PASSTHROUGH) do
    if body[key] ~= nil then
      out[key] = body[key]
    end
  end
  return json.encode(out)
end

---------------------------------------------------------------- response

local FINISH = {
  STOP = "stop",
  MAX_TOKENS = "length",
  SAFETY = "content_filter",
  RECITATION = "content_filter",
  BLOCKLIST = "content_filter",
  PROHIBITED_CONTENT = "content_filter",
  SPII = "content_filter",
  IMAGE_SAFETY = "content_filter",
}

local function finish_reason_of(reason, has_calls)
  if type(reason) ~= "string" or reason == "" or reason == "FINISH_REASON_UNSPECIFIED" then
    return nil
  end
  if reason == "STOP" and has_calls then
    return "tool_calls"
  end
  return FINISH[reason] or reason:lower()
end

local function usage_of(u)
  if type(u) ~= "table" or (u.promptTokenCount == nil and u.totalTokenCount == nil) then
    return nil
  end
  local prompt = u.promptTokenCount or 0
  local completion = (u.candidatesTokenCount or 0) + (u.thoughtsTokenCount or 0)
  return {
    prompt = prompt,
    completion = completion,
    total = u.totalTokenCount or (prompt + completion + (u.toolUsePromptTokenCount or 0)),
  }
end

-- The first candidate, or an error when the prompt was blocked.
local function candidate_of(body, required)
  local candidate = type(body.candidates) == "table" and body.candidates[1] or nil
  if type(candidate) ~= "table" then
    local feedback = body.promptFeedback
    if type(feedback) == "table" and nonempty_string(feedback.blockReason) then
      local text = "Gemini blocked the prompt: " .. feedback.blockReason
      if nonempty_string(feedback.blockReasonMessage) then
        text = text .. " (" .. feedback.blockReasonMessage .. ")"
      end
      error(text, 0)
    end
    if required then
      error("response has no candidates", 0)
    end
    return nil
  end
  return candidate
end

local function parts_of(candidate)
  local content = candidate and candidate.content
  if type(content) == "table" and type(content.parts) == "table" then
    return content.parts
  end
  return {}
end

function adapter.transform_response(raw_json)
  local body = decode_body(raw_json)
  local candidate = candidate_of(body, true)
  local text, reasoning, calls = {}, {}, json.array()
  for _, part in ipairs(parts_of(candidate)) do
    if type(part.functionCall) == "table" then
      local fc = part.functionCall
      calls[#calls + 1] = {
        id = nonempty_string(fc.id) and fc.id or "",
        type = "function",
        name = fc.name or "",
        arguments = is_object(fc.args) and fc.args or {},
        thought_signature = part.thoughtSignature,
      }
    elseif type(part.text) == "string" then
      if part.thought == true then
        reasoning[#reasoning + 1] = part.text
      else
        text[#text + 1] = part.text
      end
    end
  end
  return json.encode({
    content = table.concat(text),
    reasoning_content = table.concat(reasoning),
    finish_reason = finish_reason_of(candidate.finishReason, #calls > 0) or "",
    token_usage = usage_of(body.usageMetadata),
    tool_calls = calls,
  })
end

---------------------------------------------------------------- stream

-- Sets `value` at a partialArgs jsonPath (`$.a.b`, `$.list[0]`, `$['odd key']`) in `args`;
-- a string value extends the string already there.
local function set_path(args, path, value)
  if type(path) ~= "string" then
    return
  end
  local keys = {}
  local rest = path:gsub("^%$", "")
  while rest ~= "" do
    local key, tail = rest:match("^%.([^%.%[]+)(.*)$")
    if not key then
      local n
      n, tail = rest:match("^%[(%d+)%](.*)$")
      if n then
        key = { index = tonumber(n) + 1 }
      else
        key, tail = rest:match("^%[['\"](.-)['\"]%](.*)$")
      end
    end
    if not key then
      return -- a path we cannot read: leave the arguments alone
    end
    keys[#keys + 1] = key
    rest = tail
  end
  if #keys == 0 then
    return
  end
  local node = args
  for i = 1, #keys - 1 do
    local k = type(keys[i]) == "table" and keys[i].index or keys[i]
    if type(node[k]) ~= "table" then
      node[k] = type(keys[i + 1]) == "table" and json.array() or {}
    end
    node = node[k]
  end
  local last = type(keys[#keys]) == "table" and keys[#keys].index or keys[#keys]
  if type(value) == "string" and type(node[last]) == "string" then
    node[last] = node[last] .. value
  else
    node[last] = value
  end
end

local function partial_value(pa)
  if pa.stringValue ~= nil then
    return pa.stringValue
  elseif pa.numberValue ~= nil then
    return pa.numberValue
  elseif pa.boolValue ~= nil then
    return pa.boolValue
  elseif pa.nullValue ~= nil then
    return json.null
  end
  return nil
end

local function call_delta(call)
  if call.announced then
    -- The rest of a call announced when it opened: only its arguments.
    return { index = call.index, arguments = json.encode(call.args), thought_signature = call.signature }
  end
  return {
    index = call.index,
    id = call.id,
    name = call.name,
    arguments = json.encode(call.args),
    thought_signature = call.signature,
  }
end

local function open_call(state, fc, signature)
  local index = state.next_index
  state.next_index = index + 1
  return {
    index = index,
    id = nonempty_string(fc.id) and fc.id or nil,
    name = fc.name or "",
    args = is_object(fc.args) and fc.args or {},
    signature = signature,
  }
end

function adapter.transform_stream_chunk(raw_line)
  if raw_line == "[DONE]" then
    return ""
  end
  local chunk = decode_body(raw_line)
  local key = nonempty_string(chunk.responseId) and chunk.responseId or ""
  local candidate = candidate_of(chunk, false)
  local state = stream_state(key)

  local out = { content = "", reasoning_content = "", done = false }
  local text, reasoning, calls = {}, {}, json.array()
  local function close_pending()
    if state.pending then
      calls[#calls + 1] = call_delta(state.pending)
      state.pending = nil
    end
  end

  for _, part in ipairs(parts_of(candidate)) do
    local fc = part.functionCall
    if type(fc) == "table" then
      if nonempty_string(fc.name) then
        close_pending() -- a new call starts: the previous one is complete
        local call = open_call(state, fc, part.thoughtSignature)
        if fc.willContinue == true then
          state.pending = call
          -- Announce the call now (id and name, no arguments yet): a stream cut before
          -- it closes is then a cut tool call, not a short answer.
          calls[#calls + 1] = { index = call.index, id = call.id, name = call.name, arguments = "" }
          call.announced = true
        else
          calls[#calls + 1] = call_delta(call)
        end
      elseif state.pending then
        if type(fc.partialArgs) == "table" then
          for _, pa in ipairs(fc.partialArgs) do
            if type(pa) == "table" then
              set_path(state.pending.args, pa.jsonPath, partial_value(pa))
            end
          end
        end
        if is_object(fc.args) then
          for k, v in pairs(fc.args) do
            state.pending.args[k] = v
          end
        end
        if part.thoughtSignature and not state.pending.signature then
          state.pending.signature = part.thoughtSignature
        end
        if fc.willContinue ~= true then
          close_pending()
        end
      end
    elseif type(part.text) == "string" and part.text ~= "" then
      if part.thought == true then
        reasoning[#reasoning + 1] = part.text
      else
        text[#text + 1] = part.text
      end
    end
  end

  out.content = table.concat(text)
  out.reasoning_content = table.concat(reasoning)
  local finish = candidate and candidate.finishReason
  local useful = out.content ~= "" or out.reasoning_content ~= ""
  if nonempty_string(finish) then
    close_pending()
    out.done = true
    out.finish_reason = finish_reason_of(finish, state.next_index > 0)
    forget_stream(key)
    useful = true
  end
  if #calls > 0 then
    out.tool_calls = calls
    useful = true
  end
  local usage = usage_of(chunk.usageMetadata)
  if usage then
    out.token_usage = usage
    useful = true
  end
  if not useful then
    return ""
  end
  return json.encode(out)
end

return adapter
