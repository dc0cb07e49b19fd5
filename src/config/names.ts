/** Names that become file names, table names and lock directories: no separators, no `..`, no NUL. */
export const NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
