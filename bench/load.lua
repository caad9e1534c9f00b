-- bench/load.lua - the request mix of `make bench-load`, for wrk (bench/load.py runs it).
-- One Lua state per wrk thread; each connection takes the thread's next request. Per round of 5:
-- submit a job (every other one to an unknown pool, so it stays QUEUED), read the newest job, its
-- logs, cancel a queued one (or read the job again), list a page of 20 jobs. KESTREL_LOAD_MODE=floor
-- asks only GET /healthz, which touches nothing: the floor of the same run. KESTREL_THINK_MS: each
-- connection waits that long between its requests (0: as fast as the server answers).
local token = os.getenv("KESTREL_TOKEN") or ""
local floor = os.getenv("KESTREL_LOAD_MODE") == "floor"
local think = tonumber(os.getenv("KESTREL_THINK_MS") or "0")
local hdr = { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }
local threads = {}
local i, last, queued = 0, nil, {}
bad = 0          -- global: read by done() through thread:get

function setup(thread)
  table.insert(threads, thread)
end

function request()
  if floor then
    return wrk.format("GET", "/healthz")
  end
  i = i + 1
  local step = i % 5
  if step == 0 then
    local body = (i % 10 == 0) and '{"argv":["true"],"pool":"nowhere"}' or '{"argv":["true"]}'
    return wrk.format("POST", "/api/v1/jobs", hdr, body)
  elseif step == 1 and last then
    return wrk.format("GET", "/api/v1/jobs/" .. last, hdr)
  elseif step == 2 and last then
    return wrk.format("GET", "/api/v1/jobs/" .. last .. "/logs", hdr)
  elseif step == 3 and #queued > 0 then
    return wrk.format("POST", "/api/v1/jobs/" .. table.remove(queued) .. "/cancel", hdr)
  elseif step < 4 and last then
    return wrk.format("GET", "/api/v1/jobs/" .. last, hdr)
  end
  return wrk.format("GET", "/api/v1/jobs?page_size=20", hdr)
end

function delay()
  return think
end

function response(status, headers, body)
  if status >= 300 then
    bad = bad + 1
  elseif status == 201 then
    local id = body:match('"id":%s*"(%d+)"')
    if id then
      last = id
      if body:find('"pool":%s*"nowhere"') then
        table.insert(queued, id)
      end
    end
  end
end

function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do
    b = b + (t:get("bad") or 0)
  end
  local e = summary.errors
  io.write(string.format("KESTREL requests=%d bad=%d socket_errors=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, b, e.connect + e.read + e.write + e.timeout, latency:percentile(50),
    latency:percentile(99), latency.max))
end
