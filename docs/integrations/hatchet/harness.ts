// A Hatchet-style harness for cproxy: a task that runs Claude Code in a
// sandbox gets its own cproxy token when it starts, runs `claude -p` with
// the environment that token needs, and revokes it when it is deleted.
// The three hooks have the shape of a durable task runner's (Hatchet's, or
// any other's); there is no SDK dependency here, only Node.js 20 and the
// cproxy binary. See docs/integrations/hatchet.md.
//
//   node dist/harness.js --admin http://127.0.0.1:9001 --proxy-url http://10.20.30.4:8080 \
//       --sandbox conv-42 --prompt 'fix the failing test'
//   node dist/harness.js … --sandbox conv-42 -- CMD ARGS…   (any command instead of claude -p)

import { spawn } from "node:child_process";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

export interface CproxyConfig {
  /** cproxy's admin API, reachable by the harness only: http://127.0.0.1:9001. */
  adminUrl: string;
  /** cproxy's proxy as the sandbox reaches it: http://10.20.30.4:8080. */
  proxyUrl: string;
  /** The cproxy binary; "cproxy" on PATH when absent. */
  cproxy?: string;
}

/** What POST /tokens answers (docs/admin-api.md). Only `token` is secret. */
interface Minted {
  token: string;
  id: string;
  sandbox: string;
  profile?: string;
  expires_at: string;
}

/** One sandbox's cproxy token: the harness side of the task. */
export class SandboxToken {
  private minted?: Minted;

  constructor(
    private readonly cfg: CproxyConfig,
    readonly sandbox: string,
  ) {}

  /** Task start: mint a token for the sandbox (POST /tokens?sandbox=ID). */
  async start(opts: { profile?: string; ttl?: string } = {}): Promise<void> {
    const q = new URLSearchParams({ sandbox: this.sandbox });
    if (opts.profile) q.set("profile", opts.profile);
    if (opts.ttl) q.set("ttl", opts.ttl);
    const res = await fetch(`${this.cfg.adminUrl}/tokens?${q}`, { method: "POST" });
    if (res.status !== 201) throw await adminError(res, "POST /tokens");
    this.minted = (await res.json()) as Minted;
    // The id is safe to log; the token never is.
    log(`sandbox ${this.sandbox}: minted token ${this.minted.id}, expires ${this.minted.expires_at}`);
  }

  /**
   * The environment one command in the sandbox needs, exactly as
   * `cproxy env --format json` prints it: Claude Code's variables,
   * CPROXY_URL and CPROXY_TOKEN, npm's and git's settings. cproxy builds
   * it, so this harness never falls behind what cproxy expects.
   */
  async env(): Promise<Record<string, string>> {
    if (!this.minted) throw new Error("the task has not started: no token");
    const out = await capture(this.cfg.cproxy ?? "cproxy", [
      "env", "--format", "json", "--proxy-url", this.cfg.proxyUrl, "--token", this.minted.token,
    ]);
    return JSON.parse(out) as Record<string, string>;
  }

  /** Task delete: revoke every token of the sandbox (DELETE /tokens?sandbox=ID). */
  async delete(): Promise<void> {
    const q = new URLSearchParams({ sandbox: this.sandbox });
    const res = await fetch(`${this.cfg.adminUrl}/tokens?${q}`, { method: "DELETE" });
    if (res.status !== 204) throw await adminError(res, "DELETE /tokens");
    this.minted = undefined;
    log(`sandbox ${this.sandbox}: revoked`);
  }
}

// Variables that hold real credentials on the harness's side
// (docs/cli.md#cproxy-env). A sandbox command gets its token and none of
// these; nor inherited npm, yarn or git settings, which cproxy's own
// replace (its git settings are numbered from 0).
const credentialVars = new Set([
  "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
  "GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "NODE_AUTH_TOKEN",
]);
const ownedPrefix = /^(npm_config_|NPM_CONFIG_|YARN_NPM_|GIT_CONFIG_)/;

/** The command's environment: the harness's, scrubbed, then cproxy's. */
export function sandboxEnvironment(
  inherited: NodeJS.ProcessEnv,
  cproxyEnv: Record<string, string>,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(inherited)) {
    if (v !== undefined && !credentialVars.has(k) && !ownedPrefix.test(k)) env[k] = v;
  }
  return { ...env, ...cproxyEnv };
}

/** The task, in a durable runner's shape: start, run, delete. */
export const claudeTask = {
  name: "claude-in-sandbox",

  async onStart(ctx: { token: SandboxToken }) {
    await ctx.token.start();
  },

  /** Runs `claude -p PROMPT`, or argv when given; resolves to its exit status. */
  async run(ctx: { token: SandboxToken }, input: { prompt: string; claude?: string; argv?: string[] }) {
    const env = sandboxEnvironment(process.env, await ctx.token.env());
    const [cmd, ...args] = input.argv?.length ? input.argv : [input.claude ?? "claude", "-p", input.prompt];
    return run(cmd, args, env);
  },

  async onDelete(ctx: { token: SandboxToken }) {
    await ctx.token.delete();
  },
};

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      admin: { type: "string", default: "http://127.0.0.1:9001" },
      "proxy-url": { type: "string" },
      sandbox: { type: "string" },
      prompt: { type: "string" },
    },
  });
  if (!values["proxy-url"] || !values.sandbox || (!values.prompt && positionals.length === 0)) {
    console.error("usage: harness --proxy-url URL --sandbox ID [--admin URL] (--prompt PROMPT | -- CMD ARGS...)");
    return 2;
  }
  const ctx = {
    token: new SandboxToken({ adminUrl: values.admin!.replace(/\/+$/, ""), proxyUrl: values["proxy-url"] }, values.sandbox),
  };
  await claudeTask.onStart(ctx);
  try {
    return await claudeTask.run(ctx, { prompt: values.prompt ?? "", claude: process.env.CLAUDE, argv: positionals });
  } finally {
    // Whatever happened to the run, the token dies with the task.
    await claudeTask.onDelete(ctx);
  }
}

function log(msg: string) {
  console.error(`harness: ${msg}`);
}

async function adminError(res: Response, what: string): Promise<Error> {
  let msg = `${what} answered ${res.status}`;
  try {
    const body = (await res.json()) as { error?: string };
    if (body.error) msg = `${body.error} (HTTP ${res.status})`;
  } catch {
    // Not cproxy's JSON: the status says enough.
  }
  return new Error(msg);
}

/**
 * Runs cmd with the terminal's stdio; resolves to its exit status. SIGINT
 * and SIGTERM sent to the harness go to the command, so the harness lives
 * on to revoke the token once it has ended.
 */
function run(cmd: string, args: string[], env: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env, stdio: ["ignore", "inherit", "inherit"] });
    const forward = (sig: NodeJS.Signals) => child.kill(sig);
    process.on("SIGINT", forward).on("SIGTERM", forward);
    const done = () => process.off("SIGINT", forward).off("SIGTERM", forward);
    child.on("error", (err) => (done(), reject(err)));
    child.on("exit", (code, signal) => (done(), resolve(code ?? 128 + (signal ? signalNumber(signal) : 0))));
  });
}

function signalNumber(signal: NodeJS.Signals): number {
  return ({ SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 } as Record<string, number>)[signal] ?? 0;
}

/** Runs cmd and resolves to its stdout; its stderr goes to ours. */
function capture(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    child.on("error", reject);
    child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args[0]} exited with ${code}`))));
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    (code) => process.exit(code),
    (err: Error) => {
      log(err.message);
      process.exit(1);
    },
  );
}
