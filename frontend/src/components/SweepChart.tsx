// A uPlot chart of a sweep: points (a scatter), lines, or lines with a marker at their last
// point, over a linear, logarithmic or categorical x axis. Drawn again when its data change.
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { ChartColumns } from "../data/sweeps";
import { lastPoint } from "../data/sweeps";
import { metric, tick } from "../ui/format";
import { cssVar, currentTheme, onThemeChange, type Theme } from "../ui/theme";
import { PALETTE } from "./MetricChart";

export interface SweepSeries {
  label: string;
  values: (number | null)[];
  /** A colour, or an index into the theme's palette. */
  color: string | number;
  /** Lines between points (false: points only). */
  line: boolean;
  /** Points: at every value, at the last one only (a pruned curve's end), or none. */
  points: "all" | "last" | "none";
  dash?: number[];
  width?: number;
}

export interface SweepChartProps {
  id: string;
  title: string;
  x: number[];
  series: SweepSeries[];
  xName: string;
  /** Category names: x values are their indices. */
  xLabels?: string[] | null;
  xLog?: boolean;
  /** x is a count (trial numbers, epochs): ticks at whole numbers only. */
  xWhole?: boolean;
  empty: string;
  height?: number;
  /** Legend entries beside the title. */
  legend?: { label: string; color: string | number; dash?: boolean }[];
}

// A log axis leaves some of its ticks unlabelled: they come as null.
const tickText = (t: number | null): string => (t === null || t === undefined ? "" : tick(t));

const WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 100_000, 1_000_000];

const GREY = { light: "#9aa1ab", dark: "#6b7280" };

export function colorOf(color: string | number, theme: Theme): string {
  if (typeof color === "number") return PALETTE[theme][color % PALETTE[theme].length] as string;
  return color === "grey" ? GREY[theme] : color;
}

export function SweepChart({ id, title, x, series, xName, xLabels, xLog, xWhole, empty, height = 200, legend }: SweepChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const [width, setWidth] = useState(0);
  const [theme, setTheme] = useState(currentTheme());
  const key = JSON.stringify([x, series, xLabels, xLog]);

  useEffect(() => onThemeChange(setTheme), []);
  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const observer = new ResizeObserver(() => setWidth(Math.floor(element.clientWidth)));
    observer.observe(element);
    setWidth(Math.floor(element.clientWidth));
    return () => {
      observer.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, []);

  useEffect(() => {
    const element = box.current;
    plot.current?.destroy();
    plot.current = null;
    if (!element || width < 50 || x.length === 0 || series.length === 0) return;
    const axis = {
      stroke: cssVar("--muted"),
      grid: { stroke: cssVar("--grid"), width: 1 },
      ticks: { stroke: cssVar("--grid"), width: 1 },
      font: "11px system-ui, sans-serif",
    };
    const labels = xLabels ?? null;
    const xScale: uPlot.Scale = labels
      ? { time: false, range: () => [-0.5, labels.length - 0.5] }
      : xLog
        ? { time: false, distr: 3 }
        : { time: false, range: (_u, min, max) => (min === max ? [min - 1, max + 1] : [min, max]) };
    const xAxis: uPlot.Axis = labels
      ? { ...axis, size: 30, splits: () => labels.map((_l, i) => i), values: (_u, ticks) => ticks.map((t) => labels[t] ?? "") }
      : { ...axis, size: 30, values: (_u, ticks) => ticks.map(tickText), ...(xWhole ? { incrs: WHOLE } : {}) };
    const options: uPlot.Options = {
      width,
      height,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: xScale },
      axes: [xAxis, { ...axis, size: 52, values: (_u, ticks) => ticks.map(tickText) }],
      series: [
        { label: xName, value: (_u: uPlot, v: number | null) => (v === null ? "–" : labels ? (labels[v] ?? "–") : tickText(v)) },
        ...series.map((s) => {
          const stroke = colorOf(s.color, theme);
          const last = lastPoint(s.values);
          return {
            label: s.label,
            stroke,
            fill: s.line ? undefined : stroke,
            width: s.line ? (s.width ?? 1.6) : 0,
            dash: s.dash,
            spanGaps: true,
            paths: s.line ? undefined : () => null,
            points:
              s.points === "none"
                ? { show: false }
                : {
                    show: true,
                    size: s.line ? 7 : 8,
                    space: 0,
                    fill: stroke,
                    stroke,
                    filter: s.points === "last" ? () => (last >= 0 ? [last] : null) : undefined,
                  },
            value: (_u: uPlot, v: number | null) => metric(v),
          };
        }),
      ],
    };
    plot.current = new uPlot(options, [x, ...series.map((s) => s.values)] as uPlot.AlignedData, element);
  }, [key, theme, width, height, xWhole]);

  return (
    <section class="card chart-card" data-testid={`chart-${id}`} data-series={series.length} data-points={x.length} data-x-log={xLog ? "true" : "false"}>
      <div class="card-head">
        <h2>{title}</h2>
        <div class="grow" />
        {legend ? (
          <div class="row wrap latest">
            {legend.map((entry) => (
              <span key={entry.label} class="row nowrap" style={{ gap: "4px" }}>
                <i
                  style={{
                    width: "12px",
                    height: "0",
                    borderTop: `3px ${entry.dash ? "dashed" : "solid"} ${colorOf(entry.color, theme)}`,
                    display: "inline-block",
                  }}
                />
                {entry.label}
              </span>
            ))}
          </div>
        ) : null}
      </div>
      <div class="chart-box" style={{ height: `${height + 14}px` }}>
        <div ref={box} style={{ width: "100%", height: "100%" }} />
        {x.length === 0 || series.length === 0 ? (
          <div class="state compact">
            <span>{empty}</span>
          </div>
        ) : null}
      </div>
    </section>
  );
}

/** How a kind of point looks on the objective and parameter charts. */
export const KIND_STYLE: Record<ChartColumns["series"][number]["kind"], { color: string | number; line: boolean }> = {
  succeeded: { color: 0, line: false },
  pruned: { color: "grey", line: false },
  failed: { color: "#d23c3c", line: false },
  running: { color: 1, line: false },
  best: { color: 2, line: true },
  trial: { color: 0, line: true },
};
