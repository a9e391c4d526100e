/**
 * The metric names a PromQL expression reads, and the names a Prometheus text exposition exports:
 * enough to check that alert rules and dashboards name metrics that exist. A small tokenizer, not
 * a parser: it knows the shapes our expressions use (selectors, ranges, aggregations with
 * by/without, vector matching, functions, numbers and durations).
 */

/** Keywords and aggregation operators: identifiers that are never metric names. */
const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'offset',
  'bool',
  'and',
  'or',
  'unless',
  'atan2',
  'inf',
  'nan',
  'start',
  'end',
  'sum',
  'min',
  'max',
  'avg',
  'count',
  'group',
  'stddev',
  'stdvar',
  'topk',
  'bottomk',
  'quantile',
  'count_values',
  'limitk',
  'limit_ratio',
]);

/** Keywords followed by a parenthesised list of label names, not of expressions. */
const LABEL_LIST_KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);

/** The series a histogram exports besides its name; an expression reading one reads the histogram. */
const HISTOGRAM_SUFFIX = /_(bucket|sum|count)$/;

/** One vector selector of an expression: the series name as written and its label matchers' text. */
export interface Selector {
  /** As written (a histogram's `_bucket`, `_sum` or `_count` series included). */
  readonly series: string;
  /** The text between the selector's braces, or '' when it has none. */
  readonly matchers: string;
}

/**
 * The vector selectors of `expr`, in order. Label names and values (inside `{}`), ranges and subqueries
 * (inside `[]`), string literals, numbers, durations, functions (an identifier followed by `(`), keywords
 * and label lists after by/without/on/ignoring/group_* are not selectors.
 */
export function selectorsIn(expr: string): Selector[] {
  const selectors: Selector[] = [];
  let i = 0;
  const skipPast = (close: string): void => {
    // Past the matching `close`, stepping over string literals (a `}` inside "..." is not the end).
    while (i < expr.length && expr[i] !== close) {
      if (expr[i] === '"' || expr[i] === "'" || expr[i] === '`') skipString();
      else i++;
    }
    i++;
  };
  const skipString = (): void => {
    const quote = expr[i];
    i++;
    while (i < expr.length && expr[i] !== quote) i += expr[i] === '\\' ? 2 : 1;
    i++;
  };
  const skipSpaces = (): void => {
    while (i < expr.length && /\s/.test(expr[i]!)) i++;
  };
  while (i < expr.length) {
    const c = expr[i]!;
    if (c === '{') {
      i++;
      skipPast('}');
    } else if (c === '[') {
      i++;
      skipPast(']');
    } else if (c === '"' || c === "'" || c === '`') {
      skipString();
    } else if (c === '#') {
      while (i < expr.length && expr[i] !== '\n') i++;
    } else if (/[0-9.]/.test(c)) {
      // A number or a duration (5m, 1e3, 0x1f, 1.5): digits, letters and dots together.
      while (i < expr.length && /[0-9a-zA-Z_.]/.test(expr[i]!)) i++;
    } else if (c === '$') {
      // A dashboard variable ($__rate_interval, ${datasource}).
      i++;
      while (i < expr.length && /[\w{}]/.test(expr[i]!)) i++;
    } else if (/[a-zA-Z_:]/.test(c)) {
      const start = i;
      while (i < expr.length && /[a-zA-Z0-9_:]/.test(expr[i]!)) i++;
      const word = expr.slice(start, i);
      skipSpaces();
      if (LABEL_LIST_KEYWORDS.has(word.toLowerCase())) {
        if (expr[i] === '(') {
          i++;
          skipPast(')');
        }
      } else if (KEYWORDS.has(word.toLowerCase()) || expr[i] === '(') {
        // A keyword, an aggregation, or a function call: not a name.
      } else {
        let matchers = '';
        if (expr[i] === '{') {
          const open = ++i;
          skipPast('}');
          matchers = expr.slice(open, i - 1);
        }
        selectors.push({ series: word, matchers });
      }
    } else {
      i++;
    }
  }
  return selectors;
}

/**
 * The metric names `expr` reads, in order of first appearance (its selectors' series; a `_bucket`, `_sum`
 * or `_count` series maps to its histogram's name).
 */
export function metricNamesIn(expr: string): string[] {
  const names: string[] = [];
  for (const { series } of selectorsIn(expr)) {
    const name = series.replace(HISTOGRAM_SUFFIX, '');
    if (!names.includes(name)) names.push(name);
  }
  return names;
}

/**
 * The metric names a Prometheus text exposition declares (`# TYPE name type`), histograms and
 * summaries under their own name (what metricNamesIn maps their series to). A labelled counter
 * with no sample yet still declares its name, so it counts as exported.
 */
export function exportedMetricNames(exposition: string): Set<string> {
  const names = new Set<string>();
  for (const match of exposition.matchAll(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$/gm)) names.add(match[1]!);
  return names;
}

/** Names Prometheus itself makes for every target, whatever the target exports. */
export const PROMETHEUS_OWN_NAMES = new Set([
  'up',
  'scrape_duration_seconds',
  'scrape_samples_scraped',
  'scrape_samples_post_metric_relabeling',
  'scrape_series_added',
]);

export interface UnknownName {
  readonly where: string;
  readonly name: string;
}

/** Every (expression, name) pair whose name no source exports. */
export function unknownMetricNames(
  expressions: readonly { where: string; expr: string }[],
  exported: ReadonlySet<string>,
): UnknownName[] {
  const unknown: UnknownName[] = [];
  for (const { where, expr } of expressions) {
    for (const name of metricNamesIn(expr)) {
      if (!exported.has(name) && !PROMETHEUS_OWN_NAMES.has(name)) unknown.push({ where, name });
    }
  }
  return unknown;
}
