/**
 * Writes docs/cli.md from the CLI's own `--help` output, so the reference cannot drift from the commands.
 *
 *   node scripts/cli-docs.mjs           regenerate docs/cli.md (after `npm run build`)
 *   node scripts/cli-docs.mjs --check   exit 1 when docs/cli.md differs from what the built CLI prints
 *
 * The command list is read from `tidemark --help`, so a new command appears here without editing this script.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const BIN = `${root}bin/tidemark.js`;
const PAGE = `${root}docs/cli.md`;

function help(args) {
  // Off a terminal commander wraps at 80 columns, whatever the caller's window: the page is the same everywhere.
  const env = { ...process.env, COLUMNS: '80', TIDEMARK_FAILPOINTS: '' };
  return execFileSync(process.execPath, [BIN, ...args, '--help'], { encoding: 'utf8', env }).trimEnd();
}

/** The command names of the top-level help's "Commands:" section, in its order. */
export function commandNames(topHelp) {
  const section = topHelp.split(/^Commands:$/m)[1] ?? '';
  return section
    .split('\n')
    .map((line) => /^ {2}([a-z][a-z-]*)\b/.exec(line)?.[1])
    .filter((name) => name !== undefined && name !== 'help');
}

const INTRO = `# Command line reference

Generated from the commands' own \`--help\` by \`node scripts/cli-docs.mjs\`; \`test/e2e/cli-docs.test.ts\` fails
when this page and the CLI differ. Run \`tidemark <command> --help\` for the same text in a terminal.

Exit codes, the same for every command: \`0\` every stream committed · \`1\` a run failed (state and data are as
after the last commit; also a run that lost its own lease; \`verify\` and \`ledger verify\` found a difference) · \`2\` invalid usage or config · \`3\` another live run holds the
pipeline (nothing was done; safe to skip) · \`143\` /
\`130\` stopped by SIGTERM / SIGINT between batches (the uncommitted part rolled back, the lease released).
\`tidemark verify\`, which compares destination tables with their sources and repairs them, is explained in
[Verifying a copy](verify.md).

Environment variables:

| variable | effect |
|---|---|
| \`TIDEMARK_CACHE_DIR\` | the directory validated pipeline files are cached in (default \`$XDG_CACHE_HOME/tidemark/config\` or \`~/.cache/tidemark/config\`) |
| \`TIDEMARK_CONFIG_CACHE=off\` | parse and validate pipeline files on every run |
| \`TIDEMARK_CODE_CACHE=off\` | start the CLI without V8's code cache (kept in \`$XDG_CACHE_HOME/tidemark/code\` or \`~/.cache/tidemark/code\`) |
| \`TIDEMARK_LOG_FORMAT=json\` | log lines and errors on stderr as one JSON object a line, as \`--log-format json\` does: see [operations](operations.md#logs) |
| \`TIDEMARK_LOG_LEVEL\` | the lowest level logged: \`debug\`, \`info\`, \`warn\` or \`error\` (default \`warn\`; \`info\` for \`schedule\` and \`worker\`) |
| \`TIDEMARK_JOURNAL_DIR\` | where each run keeps its live progress and log lines for the dashboard (default \`$XDG_STATE_HOME/tidemark\`, else \`~/.local/state/tidemark\`; \`none\`: no journal): see [dashboard](dashboard.md#what-goes-on-now) |
| \`OTEL_EXPORTER_OTLP_ENDPOINT\` | send a span per run, stream and commit and the run metrics over OTLP/HTTP; with the other standard \`OTEL_*\` variables: see [operations](operations.md#metrics-and-traces) |
| \`TIDEMARK_BULK=0\` | Postgres or MySQL/MariaDB → DuckDB, Postgres or SQLite on the row path instead of the bulk path |
| \`TIDEMARK_RANGE_WRITERS=1\` | a ranged load into Postgres or the lake with one writer instead of one per reader, for comparison: see [ranges](ranges.md#readers-and-writers) |
| \`TIDEMARK_FAILPOINTS\` | crash tests only: see [how it stays correct](how-it-stays-correct.md#failpoints) |
`;

export function renderCliPage() {
  const top = help([]);
  const sections = commandNames(top).map((name) => `## tidemark ${name}\n\n\`\`\`text\n${help([name])}\n\`\`\`\n`);
  return `${INTRO}\n## tidemark\n\n\`\`\`text\n${top}\n\`\`\`\n\n${sections.join('\n')}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const page = renderCliPage();
  if (process.argv.includes('--check')) {
    if (readFileSync(PAGE, 'utf8') !== page) {
      console.error('docs/cli.md is stale: run `npm run build && node scripts/cli-docs.mjs`');
      process.exit(1);
    }
  } else {
    writeFileSync(PAGE, page);
    console.log(`wrote ${PAGE}`);
  }
}
