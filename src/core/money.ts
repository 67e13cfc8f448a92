// Money is numeric in SQL and a decimal string here; it is never a float. Arithmetic happens in SQL or in
// integer cents (BigInt); this module only formats and compares.

const MINUS = '−';

/** 1284310.55 → "1,284,310.55"; -12408.45 → "−12,408.45". */
export function formatMoney(amount: string): string {
  const cents = toCents(amount);
  const negative = cents < 0n;
  const abs = negative ? -cents : cents;
  const units = (abs / 100n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  const fraction = (abs % 100n).toString().padStart(2, '0');
  return `${negative ? MINUS : ''}${units}.${fraction}`;
}

/** A difference always shows its sign: "+1,200.00", "−12,408.45", "0.00". */
export function formatSignedMoney(amount: string): string {
  const cents = toCents(amount);
  return cents > 0n ? `+${formatMoney(amount)}` : formatMoney(amount);
}

export function toCents(amount: string): bigint {
  const match = /^(-?)(\d+)(?:\.(\d{1,2}))?$/.exec(amount.trim());
  if (!match?.[2]) throw new Error(`not a money amount: ${amount}`);
  const cents = BigInt(match[2]) * 100n + BigInt((match[3] ?? '').padEnd(2, '0'));
  return match[1] === '-' ? -cents : cents;
}

function fromCents(cents: bigint): string {
  const negative = cents < 0n;
  const abs = negative ? -cents : cents;
  return `${negative ? '-' : ''}${abs / 100n}.${(abs % 100n).toString().padStart(2, '0')}`;
}

export function subtractMoney(a: string, b: string): string {
  return fromCents(toCents(a) - toCents(b));
}

export type Direction = 'up' | 'down' | 'unchanged';

export function directionOf(diff: string): Direction {
  const cents = toCents(diff);
  return cents > 0n ? 'up' : cents < 0n ? 'down' : 'unchanged';
}
