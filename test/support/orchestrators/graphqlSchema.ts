import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// Just enough GraphQL to hold an operation to a published schema (the project has no GraphQL library, and needs
// none in production): the schema language for the vendored Dagster excerpt (schemas/dagster/), and the part of
// the query language the bot's operations use (named operations, variables, fields with arguments, inline
// fragments). What it checks is what Dagster's webserver checks before it runs anything (graphql-core's
// validate and variable coercion): every field, argument and fragment type exists where it is used, every
// variable is declared, used and of the argument's type, and every variable's value fits its input type. What it
// does not know (a type outside the excerpt) is a problem too, not a pass.

export interface TypeRef {
  name: string;
  list?: TypeRef;
  nonNull: boolean;
}

interface FieldDef {
  name: string;
  args: Map<string, { type: TypeRef; hasDefault: boolean }>;
  type: TypeRef;
}

type TypeDef =
  | { kind: 'object' | 'interface'; name: string; fields: Map<string, FieldDef>; interfaces: string[] }
  | { kind: 'input'; name: string; fields: Map<string, { type: TypeRef; hasDefault: boolean }> }
  | { kind: 'union'; name: string; members: string[] }
  | { kind: 'enum'; name: string; values: string[] }
  | { kind: 'scalar'; name: string };

const BUILT_IN_SCALARS = ['String', 'Int', 'Float', 'Boolean', 'ID'];

// ---- tokens -------------------------------------------------------------------------------------------------

type Token = { kind: 'name' | 'punct' | 'string' | 'number' | 'var'; value: string };

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  const pattern = /\s+|,|#[^\n]*|("(?:[^"\\]|\\.)*")|(\.\.\.)|(\$[_A-Za-z][_0-9A-Za-z]*)|([_A-Za-z][_0-9A-Za-z]*)|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|([{}()[\]:!=|&@])/y;
  let at = 0;
  while (at < text.length) {
    pattern.lastIndex = at;
    const match = pattern.exec(text);
    if (!match) throw new Error(`Syntax Error: Unexpected character ${JSON.stringify(text[at])} at ${at}.`);
    at = pattern.lastIndex;
    if (match[1] !== undefined) tokens.push({ kind: 'string', value: JSON.parse(match[1]) as string });
    else if (match[2] !== undefined) tokens.push({ kind: 'punct', value: '...' });
    else if (match[3] !== undefined) tokens.push({ kind: 'var', value: match[3].slice(1) });
    else if (match[4] !== undefined) tokens.push({ kind: 'name', value: match[4] });
    else if (match[5] !== undefined) tokens.push({ kind: 'number', value: match[5] });
    else if (match[6] !== undefined) tokens.push({ kind: 'punct', value: match[6] });
  }
  return tokens;
}

class Reader {
  private at = 0;
  constructor(private readonly tokens: Token[]) {}
  peek(offset = 0): Token | undefined {
    return this.tokens[this.at + offset];
  }
  done(): boolean {
    return this.at >= this.tokens.length;
  }
  next(): Token {
    const token = this.tokens[this.at++];
    if (!token) throw new Error('Syntax Error: Unexpected <EOF>.');
    return token;
  }
  is(value: string): boolean {
    const token = this.peek();
    return token !== undefined && (token.kind === 'punct' || token.kind === 'name') && token.value === value;
  }
  take(value: string): boolean {
    if (!this.is(value)) return false;
    this.at += 1;
    return true;
  }
  expect(value: string): void {
    const token = this.next();
    if (token.value !== value) throw new Error(`Syntax Error: Expected "${value}", found "${token.value}".`);
  }
  name(): string {
    const token = this.next();
    if (token.kind !== 'name') throw new Error(`Syntax Error: Expected Name, found "${token.value}".`);
    return token.value;
  }
  type(): TypeRef {
    let ref: TypeRef;
    if (this.take('[')) {
      const inner = this.type();
      this.expect(']');
      ref = { name: inner.name, list: inner, nonNull: false };
    } else {
      ref = { name: this.name(), nonNull: false };
    }
    if (this.take('!')) ref.nonNull = true;
    return ref;
  }
  /** A literal or variable value, as written. */
  value(): unknown {
    const token = this.next();
    if (token.kind === 'var') return { variable: token.value };
    if (token.kind === 'string') return token.value;
    if (token.kind === 'number') return Number(token.value);
    if (token.kind === 'name') return token.value === 'true' ? true : token.value === 'false' ? false : token.value === 'null' ? null : { enum: token.value };
    if (token.value === '[') {
      const items: unknown[] = [];
      while (!this.take(']')) items.push(this.value());
      return items;
    }
    if (token.value === '{') {
      const fields: Record<string, unknown> = {};
      while (!this.take('}')) {
        const name = this.name();
        this.expect(':');
        fields[name] = this.value();
      }
      return { object: fields };
    }
    throw new Error(`Syntax Error: Unexpected "${token.value}".`);
  }
}

// ---- the schema -------------------------------------------------------------------------------------------------

function parseSchema(text: string): Map<string, TypeDef> {
  const reader = new Reader(tokenize(text));
  const types = new Map<string, TypeDef>();
  const argsOf = () => {
    const args = new Map<string, { type: TypeRef; hasDefault: boolean }>();
    if (reader.take('(')) {
      while (!reader.take(')')) {
        const name = reader.name();
        reader.expect(':');
        const type = reader.type();
        const hasDefault = reader.take('=');
        if (hasDefault) reader.value();
        args.set(name, { type, hasDefault });
      }
    }
    return args;
  };
  while (!reader.done()) {
    const keyword = reader.name();
    const name = reader.name();
    if (keyword === 'scalar') {
      types.set(name, { kind: 'scalar', name });
    } else if (keyword === 'union') {
      reader.expect('=');
      const members: string[] = [];
      reader.take('|');
      do members.push(reader.name()); while (reader.take('|'));
      types.set(name, { kind: 'union', name, members });
    } else if (keyword === 'enum') {
      reader.expect('{');
      const values: string[] = [];
      while (!reader.take('}')) values.push(reader.name());
      types.set(name, { kind: 'enum', name, values });
    } else if (keyword === 'input') {
      reader.expect('{');
      const fields = new Map<string, { type: TypeRef; hasDefault: boolean }>();
      while (!reader.take('}')) {
        const field = reader.name();
        reader.expect(':');
        const type = reader.type();
        const hasDefault = reader.take('=');
        if (hasDefault) reader.value();
        fields.set(field, { type, hasDefault });
      }
      types.set(name, { kind: 'input', name, fields });
    } else if (keyword === 'type' || keyword === 'interface') {
      const interfaces: string[] = [];
      if (reader.take('implements')) {
        reader.take('&');
        do interfaces.push(reader.name()); while (reader.take('&'));
      }
      reader.expect('{');
      const fields = new Map<string, FieldDef>();
      while (!reader.take('}')) {
        const field = reader.name();
        const args = argsOf();
        reader.expect(':');
        fields.set(field, { name: field, args, type: reader.type() });
      }
      types.set(name, { kind: keyword === 'type' ? 'object' : 'interface', name, fields, interfaces });
    } else {
      throw new Error(`the schema has a ${keyword} definition, which this reader does not know`);
    }
  }
  return types;
}

// ---- operations ---------------------------------------------------------------------------------------------------

export type Selection =
  | { kind: 'field'; name: string; args: Record<string, unknown>; selections?: Selection[] }
  | { kind: 'fragment'; on: string; selections: Selection[] };

export interface ParsedOperation {
  type: 'query' | 'mutation';
  name: string | undefined;
  variables: Map<string, TypeRef>;
  selections: Selection[];
}

function parseSelections(reader: Reader): Selection[] {
  reader.expect('{');
  const selections: Selection[] = [];
  while (!reader.take('}')) {
    if (reader.take('...')) {
      reader.expect('on');
      const on = reader.name();
      selections.push({ kind: 'fragment', on, selections: parseSelections(reader) });
      continue;
    }
    const name = reader.name();
    if (reader.is(':')) throw new Error('aliases are not used by the bot, and not read here');
    const args: Record<string, unknown> = {};
    if (reader.take('(')) {
      while (!reader.take(')')) {
        const arg = reader.name();
        reader.expect(':');
        args[arg] = reader.value();
      }
    }
    selections.push({ kind: 'field', name, args, ...(reader.is('{') ? { selections: parseSelections(reader) } : {}) });
  }
  return selections;
}

export function parseOperation(query: string): ParsedOperation {
  const reader = new Reader(tokenize(query));
  const type = reader.name();
  if (type !== 'query' && type !== 'mutation') throw new Error(`Syntax Error: Unexpected Name "${type}".`);
  const name = reader.peek()?.kind === 'name' ? reader.name() : undefined;
  const variables = new Map<string, TypeRef>();
  if (reader.take('(')) {
    while (!reader.take(')')) {
      const token = reader.next();
      if (token.kind !== 'var') throw new Error(`Syntax Error: Expected "$", found "${token.value}".`);
      reader.expect(':');
      variables.set(token.value, reader.type());
      if (reader.take('=')) reader.value();
    }
  }
  const selections = parseSelections(reader);
  if (!reader.done()) throw new Error('Syntax Error: one operation per document is all the bot sends.');
  return { type, name, variables, selections };
}

// ---- checks -------------------------------------------------------------------------------------------------------

const show = (ref: TypeRef): string => `${ref.list ? `[${show(ref.list)}]` : ref.name}${ref.nonNull ? '!' : ''}`;

export class GraphqlSchema {
  readonly types: Map<string, TypeDef>;

  constructor(text: string) {
    this.types = parseSchema(text);
  }

  static vendoredDagster(): GraphqlSchema {
    return new GraphqlSchema(readFileSync(fileURLToPath(new URL('../../../schemas/dagster/schema-excerpt.graphql', import.meta.url)), 'utf8'));
  }

  /** The object types a value of this type can be. */
  possibleTypes(name: string): Set<string> {
    const type = this.types.get(name);
    if (!type) return new Set();
    if (type.kind === 'object') return new Set([name]);
    if (type.kind === 'union') return new Set(type.members);
    if (type.kind === 'interface') {
      return new Set([...this.types.values()].filter((t) => t.kind === 'object' && t.interfaces.includes(name)).map((t) => t.name));
    }
    return new Set();
  }

  /** Every problem with the operation and its variables, in graphql-core's words where it has them; empty when valid. */
  check(query: string, variables: Record<string, unknown>): string[] {
    let operation: ParsedOperation;
    try {
      operation = parseOperation(query);
    } catch (error) {
      return [(error as Error).message];
    }
    const problems: string[] = [];
    const used = new Set<string>();
    const root = operation.type === 'query' ? 'Query' : 'Mutation';
    this.checkSelections(root, operation.selections, operation.variables, used, problems);
    for (const name of operation.variables.keys()) {
      if (!used.has(name)) problems.push(`Variable "$${name}" is never used in operation "${operation.name ?? ''}".`);
    }
    for (const [name, type] of operation.variables) {
      this.checkValue(`Variable "$${name}"`, type, variables[name], name in variables, problems);
    }
    return problems;
  }

  private checkSelections(parent: string, selections: Selection[], declared: Map<string, TypeRef>, used: Set<string>, problems: string[]): void {
    const type = this.types.get(parent);
    if (!type || (type.kind !== 'object' && type.kind !== 'interface' && type.kind !== 'union')) {
      problems.push(`Type "${parent}" is outside the vendored schema excerpt, or has no fields.`);
      return;
    }
    for (const selection of selections) {
      if (selection.kind === 'fragment') {
        const possible = this.possibleTypes(selection.on);
        if (!this.types.has(selection.on)) problems.push(`Unknown type "${selection.on}".`);
        else if (![...possible].some((name) => this.possibleTypes(parent).has(name))) {
          problems.push(`Fragment cannot be spread here as objects of type "${parent}" can never be of type "${selection.on}".`);
        } else {
          this.checkSelections(selection.on, selection.selections, declared, used, problems);
        }
        continue;
      }
      if (selection.name === '__typename') continue;
      const field = type.kind === 'union' ? undefined : type.fields.get(selection.name);
      if (!field) {
        problems.push(`Cannot query field "${selection.name}" on type "${parent}".`);
        continue;
      }
      for (const [arg, value] of Object.entries(selection.args)) {
        const expected = field.args.get(arg);
        if (!expected) {
          problems.push(`Unknown argument "${arg}" on field "${parent}.${field.name}".`);
          continue;
        }
        const variable = value !== null && typeof value === 'object' && 'variable' in value ? String((value as { variable: string }).variable) : undefined;
        if (variable === undefined) {
          problems.push(`Argument "${arg}" of "${parent}.${field.name}" is written out; the bot passes every value as a variable.`);
          continue;
        }
        used.add(variable);
        const declaredType = declared.get(variable);
        if (!declaredType) problems.push(`Variable "$${variable}" is not defined.`);
        else if (!this.fits(declaredType, expected.type)) {
          problems.push(`Variable "$${variable}" of type "${show(declaredType)}" used in position expecting type "${show(expected.type)}".`);
        }
      }
      for (const [arg, expected] of field.args) {
        if (expected.type.nonNull && !expected.hasDefault && !(arg in selection.args)) {
          problems.push(`Field "${field.name}" argument "${arg}" of type "${show(expected.type)}" is required, but it was not provided.`);
        }
      }
      const named = this.types.get(field.type.name);
      const leaf = BUILT_IN_SCALARS.includes(field.type.name) || named?.kind === 'scalar' || named?.kind === 'enum';
      if (leaf && selection.selections) problems.push(`Field "${field.name}" must not have a selection since type "${show(field.type)}" has no subfields.`);
      else if (!leaf && !selection.selections) problems.push(`Field "${field.name}" of type "${show(field.type)}" must have a selection of subfields.`);
      else if (!leaf && selection.selections) this.checkSelections(field.type.name, selection.selections, declared, used, problems);
    }
  }

  /** A variable of type `given` may stand where `expected` is wanted: the same type, at least as strict. */
  private fits(given: TypeRef, expected: TypeRef): boolean {
    if (expected.nonNull && !given.nonNull) return false;
    if (expected.list || given.list) return !!expected.list && !!given.list && this.fits(given.list, expected.list);
    return given.name === expected.name;
  }

  private checkValue(where: string, type: TypeRef, value: unknown, present: boolean, problems: string[]): void {
    if (value === undefined || value === null) {
      if (type.nonNull) problems.push(`${where} of non-null type "${show(type)}" must not be null${present ? '' : ' (it was not provided)'}.`);
      return;
    }
    if (type.list) {
      const items = Array.isArray(value) ? value : [value];
      items.forEach((item, index) => this.checkValue(`${where}[${index}]`, type.list as TypeRef, item, true, problems));
      return;
    }
    const scalarProblem = this.scalarProblem(type.name, value);
    if (scalarProblem !== undefined) {
      if (scalarProblem) problems.push(`${where} got invalid value ${JSON.stringify(value)}; ${scalarProblem}`);
      return;
    }
    const named = this.types.get(type.name);
    if (!named) {
      problems.push(`${where}: type "${type.name}" is outside the vendored schema excerpt.`);
    } else if (named.kind === 'enum') {
      if (typeof value !== 'string' || !named.values.includes(value)) problems.push(`${where} got invalid value ${JSON.stringify(value)}; Value does not exist in "${named.name}" enum.`);
    } else if (named.kind === 'scalar') {
      // A custom scalar (RunConfigData, GenericScalar) takes any JSON.
    } else if (named.kind === 'input') {
      if (typeof value !== 'object' || Array.isArray(value)) {
        problems.push(`${where} got invalid value ${JSON.stringify(value)}; Expected type "${named.name}" to be an object.`);
        return;
      }
      const object = value as Record<string, unknown>;
      for (const key of Object.keys(object)) {
        if (!named.fields.has(key)) problems.push(`${where} got invalid value; Field "${key}" is not defined by type "${named.name}".`);
      }
      for (const [key, field] of named.fields) {
        if (field.type.nonNull && !field.hasDefault && !(key in object)) problems.push(`${where} got invalid value; Field "${named.name}.${key}" of required type "${show(field.type)}" was not provided.`);
        else if (key in object) this.checkValue(`${where}.${key}`, field.type, object[key], true, problems);
      }
    } else {
      problems.push(`${where}: "${named.name}" is not an input type.`);
    }
  }

  /** For a built-in scalar: '' when the value fits, a reason when not; undefined for any other type. */
  private scalarProblem(name: string, value: unknown): string | undefined {
    switch (name) {
      case 'String': return typeof value === 'string' ? '' : 'String cannot represent a non string value.';
      case 'Int': return Number.isInteger(value) ? '' : 'Int cannot represent non-integer value.';
      case 'Float': return typeof value === 'number' ? '' : 'Float cannot represent non numeric value.';
      case 'Boolean': return typeof value === 'boolean' ? '' : 'Boolean cannot represent a non boolean value.';
      case 'ID': return typeof value === 'string' || Number.isInteger(value) ? '' : 'ID cannot represent a non-string and non-integer value.';
      default: return undefined;
    }
  }

  /**
   * What a server answers for `selections` of this value: only the fields asked for, each fragment's fields only
   * when the value is of a type the fragment covers. `value` carries its __typename wherever it is an object; a
   * field asked for that the value lacks is the stand-in's own mistake, and throws.
   */
  project(selections: Selection[], value: unknown): unknown {
    if (value === null || value === undefined) return null;
    if (Array.isArray(value)) return value.map((item) => this.project(selections, item));
    const object = value as Record<string, unknown>;
    const typename = object.__typename;
    if (typeof typename !== 'string') throw new Error(`a stand-in answer lacks __typename: ${JSON.stringify(value)}`);
    const out: Record<string, unknown> = {};
    for (const selection of selections) {
      if (selection.kind === 'fragment') {
        if (this.possibleTypes(selection.on).has(typename)) Object.assign(out, this.project(selection.selections, value));
        continue;
      }
      if (selection.name === '__typename') {
        out.__typename = typename;
        continue;
      }
      if (!(selection.name in object)) throw new Error(`a stand-in ${typename} lacks ${selection.name}`);
      const field = object[selection.name];
      out[selection.name] = selection.selections ? this.project(selection.selections, field) : field;
    }
    return out;
  }
}
