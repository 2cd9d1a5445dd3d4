// The test client of tests/server: the official openai npm package against k3-server.
// Usage: node client.mjs '{"base": URL, "key": KEY, "op": OP, ...}'; prints one JSON result.
//   models                  list + retrieve of an unknown id
//   models_full             the list's data and the first model retrieved by its id
//   create   {params}       one request (streamed when params.stream): the answer or the chunks
//   concurrent {list, delays} several requests at once, each as `create`
//   sequence {list}         several requests one after another, each as in `concurrent` (one node
//                           start); an item {"op": "models_full"} is that op
//   abort    {params, after} a stream the client aborts after `after` chunks
//   error    {params}       a request expected to fail: its status and error object
import OpenAI from "openai";

const spec = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: spec.base, apiKey: spec.key ?? "none", maxRetries: 0, timeout: 120000 });

function endpoint(params) {
  return params.messages ? client.chat.completions : client.completions;
}

async function create(params) {
  const t0 = Date.now();
  if (!params.stream) return { response: await endpoint(params).create(params), ms: Date.now() - t0 };
  const chunks = [];
  for await (const c of await endpoint(params).create(params)) chunks.push(c);
  return { chunks, ms: Date.now() - t0 };
}

async function modelsFull() {
  const list = await client.models.list();
  return { data: list.data, retrieved: await client.models.retrieve(list.data[0].id) };
}

async function main() {
  switch (spec.op) {
    case "models": {
      const list = await client.models.list();
      let unknown = null;
      try {
        await client.models.retrieve("no-such-model");
      } catch (e) {
        unknown = e.status;
      }
      return { ids: list.data.map((m) => m.id), unknown_status: unknown };
    }
    case "models_full":
      return await modelsFull();
    case "create":
      return await create(spec.params);
    case "concurrent":
      // delays[i]: ms before request i starts (so the earlier ones are already queued or running)
      return await Promise.all(
        spec.list.map((p, i) =>
          new Promise((r) => setTimeout(r, (spec.delays ?? [])[i] ?? 0))
            .then(() => create(p))
            .catch((e) => ({ status: e.status ?? null, error: e.error ?? String(e) }))));
    case "sequence": {
      const out = [];
      for (const p of spec.list)
        out.push(await (p.op === "models_full" ? modelsFull() : create(p))
          .catch((e) => ({ status: e.status ?? null, error: e.error ?? String(e) })));
      return out;
    }
    case "abort": {
      const controller = new AbortController();
      const stream = await endpoint(spec.params).create(spec.params, { signal: controller.signal });
      let n = 0;
      try {
        for await (const c of stream) {
          void c;
          if (++n >= spec.after) controller.abort();
        }
      } catch (e) {
        return { chunks: n, aborted: e.name };
      }
      return { chunks: n, aborted: null };
    }
    case "error":
      try {
        await create(spec.params);
        return { status: null };
      } catch (e) {
        return { status: e.status ?? null, error: e.error ?? null, name: e.constructor.name };
      }
  }
  throw new Error("unknown op " + spec.op);
}

main().then(
  (r) => process.stdout.write(JSON.stringify(r) + "\n"),
  (e) => {
    process.stderr.write("client.mjs: " + (e.stack || e) + "\n");
    process.exit(1);
  });
