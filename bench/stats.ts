// Figures of a set of timed runs, and the arithmetic the report needs.

export interface Spread {
  median: number;
  min: number;
  max: number;
  /** Every run, in the order they ran. */
  runs: number[];
}

export function median(values: number[]): number {
  if (values.length === 0) throw new Error('median of nothing');
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

export function spread(runs: number[]): Spread {
  return { median: median(runs), min: Math.min(...runs), max: Math.max(...runs), runs };
}

export function sum(values: number[]): number {
  return values.reduce((total, value) => total + value, 0);
}
