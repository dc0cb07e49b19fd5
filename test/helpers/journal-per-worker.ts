/**
 * Each test worker keeps its runs' journals (the dashboard's live view) in a folder of its own: journals are found by
 * pipeline name, and test files running at the same time reuse names such as `p`, so a shared folder let one test's
 * dashboard show another test's running stream.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';

process.env.TIDEMARK_JOURNAL_DIR = join(tmpdir(), `tidemark-test-journal-${process.pid}`);
