-- Mistral chat completions (OpenAI-like): https://api.mistral.ai + /v1/chat/completions.
-- The broker adds `Authorization: Bearer <key>`.
--
-- Starts from the built-in openai adapter (`builtin("openai")`; its error handling already
-- reads Mistral's top-level `{"object": "error", "message": ...}` bodies and its stream
-- reader takes tool calls without `index`) and changes:
-- * Tool-call ids must be exactly 9 characters a-z, A-Z, 0-9 ("Tool call id was abc123
--   but must be a-z, A-Z, 0-9, with a length of 9."). Ids of another shape (`call_…` from
--   OpenAI, `toolu_…` from Anthropic, left in the history by a source switch) are replaced
--   by a 9-character hash of the id, the same in the assistant's `tool_calls` and in the
--   tool message's `tool_call_id`, so the pairs still match. Mistral's own ids pass as is.
--   One to one within a request: an id already sent (a later turn repeating an id, a
--   hash collision) is hashed again with a counter; a result takes its latest call's id.
-- * Mistral rejects unknown fields (422), so only its request fields are sent: other extra
--   top-level keys are dropped (logged at debug), `stream_options` included (Mistral sends
--   usage on the last chunk by itself); `seed` → `random_seed`. Tool messages get the
--   tool's `name`.
-- * Magistral answers with content chunks: `thinking` parts become reasoning, `text` parts
--   the content (openai.lua would drop the thinking).

local adapter = builtin("openai")
adapter.name = "mistral"
adapter.version = "1.0.0"
adapter.endpoint = "/v1/chat/completions"
adapter.headers = {}

local openai_request = adapter.transform_request
local openai_response = adapter.transform_response
local openai_chunk = adapter.transform_stream_chunk

-- Top-level fields of Mistral's chat completion request.
local FIELDS = {}
for _, k in ipairs({
  "model", "messages", "temperature", "top_p", "max_tokens", "stream", "stop",
  "random_seed", "response_format", "tools", "tool_choice", "presence_penalty",
  "frequency_penalty", "n", "prediction", "parallel_tool_calls", "prompt_mode",
  "safe_prompt",
}) do
  FIELDS[k] = true
end

-- 9 characters [A-Za-z0-9]: a valid Mistral id as is, any other (or any id with a `salt`)
-- its FNV-1a hash.
local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
local function mistral_id(id, salt)
  if type(id) ~= "string" then
    id = ""
  end
  if salt == nil and #id == 9 and id:match("^[A-Za-z0-9]+$") then
    return id
  end
  id = salt and (id .. "#" .. salt) or id
  local h = -3750763034362895579 -- 0xcbf29ce484222325, the 64-bit FNV offset basis
  for i = 1, #id do
    h = (h ~ id:byte(i)) * 1099511628211 -- wraps around, as FNV wants
  end
  local out = {}
  for i = 1, 9 do
    local d = h % 62
    out[i] = ALPHABET:sub(d + 1, d + 1)
    h = h // 62
  end
  return table.concat(out)
end

function adapter.transform_request(raw_json)
  local body = json.decode(openai_request(raw_json))
  if body.seed ~= nil and body.random_seed == nil then
    body.random_seed = body.seed
  end
  for k in pairs(body) do
    if not FIELDS[k] then
      log("debug", "mistral does not take `" .. tostring(k) .. "`: dropped")
      body[k] = nil
    end
  end
  -- names: id as sent → tool name; taken: ids sent; latest: id as given → as sent.
  local names, taken, latest = {}, {}, {}
  for _, msg in ipairs(type(body.messages) == "table" and body.messages or {}) do
    for _, tc in ipairs(msg.tool_calls or {}) do
      local id, n = mistral_id(tc.id), 0
      while taken[id] do
        n = n + 1
        id = mistral_id(tc.id, n)
      end
      taken[id], latest[tostring(tc.id)] = true, id
      tc.id = id
      names[id] = type(tc["function"]) == "table" and tc["function"].name or nil
    end
    if msg.role == "tool" then
      msg.tool_call_id = latest[msg.tool_call_id] or mistral_id(msg.tool_call_id)
      msg.name = msg.name or names[msg.tool_call_id]
    end
  end
  return json.encode(body)
end

-- Content chunks → `content` text and `reasoning_content`; true when something changed.
local function flatten(message)
  if type(message) ~= "table" or type(message.content) ~= "table" then
    return false
  end
  local text, reasoning = {}, {}
  for _, part in ipairs(message.content) do
    if type(part) == "table" and part.type == "thinking" then
      local t = part.thinking
      if type(t) == "string" then
        reasoning[#reasoning + 1] = t
      elseif type(t) == "table" then
        for _, p in ipairs(t) do
          if type(p) == "table" and type(p.text) == "string" then
            reasoning[#reasoning + 1] = p.text
          end
        end
      end
    elseif type(part) == "table" and type(part.text) == "string" then
      text[#text + 1] = part.text
    end
  end
  message.content = table.concat(text)
  message.reasoning_content = (message.reasoning_content or "") .. table.concat(reasoning)
  return true
end

-- Rewrites the body only when a message/delta has content chunks (the common case passes
-- the raw text straight through).
local function with_flat_content(raw, key)
  if not raw:find('"thinking"', 1, true) then
    return raw
  end
  local ok, body = pcall(json.decode, raw)
  local choice = ok and type(body) == "table" and type(body.choices) == "table" and body.choices[1]
  if type(choice) == "table" and flatten(choice[key]) then
    return json.encode(body)
  end
  return raw
end

function adapter.transform_response(raw_json)
  return openai_response(with_flat_content(raw_json, "message"))
end

function adapter.transform_stream_chunk(raw_line)
  return openai_chunk(with_flat_content(raw_line, "delta"))
end

return adapter
