// The fine-tune loss chart: an inline SVG (no charting library) with one path.train and
// one path.valid line, axes with ticks, and a legend. Both paths always exist, with an
// empty `d` until their first point, so the page's shape does not depend on the data.

const NS = 'http://www.w3.org/2000/svg';
const WIDTH = 640;
const HEIGHT = 280;
const MARGIN = { top: 28, right: 18, bottom: 40, left: 58 };
const PLOT_W = WIDTH - MARGIN.left - MARGIN.right;
const PLOT_H = HEIGHT - MARGIN.top - MARGIN.bottom;

// svg('path', {class: 'train', d: ''}, ...children): el() of util.js, in the SVG namespace.
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// [[iteration, loss], ...] with anything malformed (NaN losses do happen) left out.
function points(list) {
  if (!Array.isArray(list)) return [];
  return list
    .filter((pair) => Array.isArray(pair) && Number.isFinite(pair[0]) && Number.isFinite(pair[1]))
    .map(([x, y]) => [Number(x), Number(y)])
    .sort((a, b) => a[0] - b[0]);
}

// A 1, 2 or 5 times a power of ten step giving about `count` intervals over `span`.
function niceStep(span, count) {
  const raw = span / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const fraction = raw / power;
  const nice = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  return nice * power;
}

function decimalsOf(step) {
  return Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
}

// The loss axis: from a tick below the lowest loss to one above the highest.
function lossScale(values) {
  let low = Math.min(...values);
  let high = Math.max(...values);
  if (high - low < 1e-9) {
    low -= 0.5;
    high += 0.5;
  }
  const step = niceStep(high - low, 5);
  low = Math.floor(low / step) * step;
  high = Math.ceil(high / step) * step;
  return { low, high, step };
}

// The iteration axis starts at 0 and reaches the planned iterations, so the lines grow
// across a fixed frame while training runs instead of being stretched on each report.
function iterationScale(maxSeen, planned) {
  const high = Math.max(maxSeen, planned || 0, 1);
  const step = Math.max(1, niceStep(high, 6));
  return { low: 0, high: Math.ceil(high / step) * step, step };
}

function tickValues({ low, high, step }) {
  const values = [];
  for (let index = 0; low + index * step <= high + step * 1e-6; index += 1) values.push(low + index * step);
  return values;
}

function pathData(list, x, y) {
  // A lone point still shows, as a dot: the line caps are round.
  if (list.length === 1) return `M${x(list[0][0])},${y(list[0][1])}h0`;
  return list.map(([it, loss], index) => `${index ? 'L' : 'M'}${x(it)},${y(loss)}`).join('');
}

const round = (value) => Math.round(value * 10) / 10;

export class LossPlot {
  constructor(svgElement) {
    this.svg = svgElement;
    this.svg.setAttribute('viewBox', `0 0 ${WIDTH} ${HEIGHT}`);
    this.svg.setAttribute('preserveAspectRatio', 'xMidYMid meet');
    this.grid = svg('g', { class: 'grid' });
    this.xAxis = svg('g', { class: 'axis x-axis' });
    this.yAxis = svg('g', { class: 'axis y-axis' });
    this.train = svg('path', { class: 'train', d: '' });
    this.valid = svg('path', { class: 'valid', d: '' });
    this.validDots = svg('g', { class: 'valid-dots' });
    this.empty = svg('text', { class: 'empty-note', x: MARGIN.left + PLOT_W / 2, y: MARGIN.top + PLOT_H / 2, 'text-anchor': 'middle' }, 'No loss reported yet');
    this.legend = this.buildLegend();
    this.svg.append(this.grid, this.xAxis, this.yAxis, this.train, this.valid, this.validDots, this.legend, this.empty, ...this.axisTitles());
    this.description = this.svg.querySelector('desc');
  }

  buildLegend() {
    const entry = (kind, label, offset) =>
      svg(
        'g',
        { class: `legend-item legend-${kind}`, transform: `translate(${offset},0)` },
        svg('line', { class: `swatch swatch-${kind}`, x1: 0, x2: 18, y1: 0, y2: 0 }),
        svg('text', { x: 24, y: 4 }, label),
      );
    this.trainLabel = entry('train', 'Training', 0);
    this.validLabel = entry('valid', 'Validation', 150);
    return svg('g', { class: 'legend', transform: `translate(${MARGIN.left + 4},${MARGIN.top - 14})` }, this.trainLabel, this.validLabel);
  }

  axisTitles() {
    return [
      svg('text', { class: 'axis-title', x: MARGIN.left + PLOT_W / 2, y: HEIGHT - 4, 'text-anchor': 'middle' }, 'iteration'),
      svg('text', { class: 'axis-title', transform: `translate(14,${MARGIN.top + PLOT_H / 2}) rotate(-90)`, 'text-anchor': 'middle' }, 'loss'),
    ];
  }

  // metrics: the job's metrics ({train_loss, val_loss}); planned: params.iters, if known.
  update(metrics, planned) {
    const train = points(metrics?.train_loss);
    const valid = points(metrics?.val_loss);
    const all = [...train, ...valid];
    const xs = iterationScale(Math.max(0, ...all.map((p) => p[0])), Number(planned) || 0);
    const ys = all.length ? lossScale(all.map((p) => p[1])) : { low: 0, high: 1, step: 0.2 };
    const x = (value) => round(MARGIN.left + ((value - xs.low) / (xs.high - xs.low)) * PLOT_W);
    const y = (value) => round(MARGIN.top + PLOT_H - ((value - ys.low) / (ys.high - ys.low)) * PLOT_H);
    this.drawAxes(xs, ys, x, y);
    this.train.setAttribute('d', train.length ? pathData(train, x, y) : '');
    this.valid.setAttribute('d', valid.length ? pathData(valid, x, y) : '');
    // Validation runs seldom: dots show where each of its few points is.
    this.validDots.replaceChildren(...valid.map(([it, loss]) => svg('circle', { cx: x(it), cy: y(loss), r: 3 })));
    this.empty.style.display = all.length ? 'none' : '';
    this.describe(train, valid);
  }

  drawAxes(xs, ys, x, y) {
    const left = MARGIN.left;
    const right = MARGIN.left + PLOT_W;
    const bottom = MARGIN.top + PLOT_H;
    const xDecimals = decimalsOf(xs.step);
    const yDecimals = decimalsOf(ys.step);
    const grid = [];
    const xTicks = [svg('line', { class: 'domain', x1: left, x2: right, y1: bottom, y2: bottom })];
    for (const value of tickValues(xs)) {
      const at = x(value);
      xTicks.push(svg('line', { x1: at, x2: at, y1: bottom, y2: bottom + 5 }));
      xTicks.push(svg('text', { x: at, y: bottom + 18, 'text-anchor': 'middle' }, value.toFixed(xDecimals)));
    }
    const yTicks = [svg('line', { class: 'domain', x1: left, x2: left, y1: MARGIN.top, y2: bottom })];
    for (const value of tickValues(ys)) {
      const at = y(value);
      grid.push(svg('line', { x1: left, x2: right, y1: at, y2: at }));
      yTicks.push(svg('line', { x1: left - 5, x2: left, y1: at, y2: at }));
      yTicks.push(svg('text', { x: left - 8, y: at + 4, 'text-anchor': 'end' }, value.toFixed(yDecimals)));
    }
    this.grid.replaceChildren(...grid);
    this.xAxis.replaceChildren(...xTicks);
    this.yAxis.replaceChildren(...yTicks);
  }

  // The picture's text alternative, and the legend, give the latest value of each line.
  describe(train, valid) {
    const last = (list) => (list.length ? list[list.length - 1] : null);
    const phrase = (label, point) => (point ? `${label} loss ${point[1].toFixed(3)} at iteration ${point[0]}` : `no ${label.toLowerCase()} loss yet`);
    if (this.description) this.description.textContent = `${phrase('Training', last(train))}; ${phrase('Validation', last(valid))}.`;
    this.trainLabel.querySelector('text').textContent = last(train) ? `Training ${last(train)[1].toFixed(3)}` : 'Training';
    this.validLabel.querySelector('text').textContent = last(valid) ? `Validation ${last(valid)[1].toFixed(3)}` : 'Validation';
  }
}
