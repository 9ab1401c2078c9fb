/** Edits (insert, delete, replace) from `a` to `b`, to suggest a command or option for a typo. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(
        previous[j]! + 1,
        row[j - 1]! + 1,
        previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    previous = row;
  }
  return previous[b.length]!;
}

/** "did you mean" for a mistyped word: the closest of `names` within two edits, if one is. */
export function suggestion(word: string, names: readonly string[]): string {
  const ranked = names
    .map((name) => ({ name, edits: editDistance(word, name) }))
    .filter((c) => c.edits <= Math.min(2, Math.floor(c.name.length / 2)))
    .sort((a, b) => a.edits - b.edits);
  return ranked[0] ? ` (did you mean "${ranked[0].name}"?)` : '';
}
