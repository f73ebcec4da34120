// A uPlot chart of some of a job's series, redrawn (at most once per animation frame, by the
// store) only when one of its series changed. Drag to zoom: the view is downsampled again
// from the points held; double-click to see everything.
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { buildChartData, fullRange, type ViewRange } from "../data/chartData";
import type { Series } from "../data/series";
import { metric, tick } from "../ui/format";
import { cssVar, currentTheme, onThemeChange } from "../ui/theme";

export const PALETTE = {
  light: ["#3b6ef5", "#e0642c", "#1d9c6c", "#9b51e0", "#d4a017", "#d23c7a", "#0e9bb3", "#6b7280"],
  dark: ["#6b93ff", "#ff8a57", "#3ccf95", "#b98cff", "#f0c94b", "#ff6ba5", "#4fd1e8", "#9aa5b3"],
};

const SYNC_KEY = "job-steps";
const resets = new Set<() => void>();
function resetAll(): void {
  for (const reset of resets) reset();
}

export interface ChartProps {
  id: string;
  title: string;
  series: Series[];
  label: (s: Series) => string;
  empty: string;
  /** Draw points, not only lines (sparse series such as epoch-end or eval metrics). */
  points?: boolean;
  height?: number;
}

export function MetricChart({ id, title, series, label, empty, points, height = 180 }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = useRef<string>("");
  const view = useRef<ViewRange | null>(null);
  const seriesRef = useRef(series);
  seriesRef.current = series;
  const bucketsRef = useRef(100);
  const [width, setWidth] = useState(0);
  const [theme, setTheme] = useState(currentTheme());
  const [counts, setCounts] = useState({ drawn: 0, held: 0 });
  const latest = series.map((s) => s.latest());
  const labels = series.map(label);
  const versions = series.map((s) => s.version).join(",");
  const received = series.reduce((n, s) => n + s.received, 0);

  useEffect(() => onThemeChange(setTheme), []);
  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const observer = new ResizeObserver(() => setWidth(Math.floor(element.clientWidth)));
    observer.observe(element);
    setWidth(Math.floor(element.clientWidth));
    return () => observer.disconnect();
  }, []);
  useEffect(() => {
    const reset = () => {
      const u = plot.current;
      if (!u || view.current === null) return;
      view.current = null;
      const built = buildChartData(seriesRef.current, bucketsRef.current, null);
      u.setData(built.data as uPlot.AlignedData, true);
      setCounts({ drawn: built.drawn, held: built.held });
    };
    resets.add(reset);
    return () => {
      resets.delete(reset);
      plot.current?.destroy();
      plot.current = null;
    };
  }, []);

  useEffect(() => {
    const element = box.current;
    if (!element || width < 50) return;
    if (series.length === 0) {
      plot.current?.destroy();
      plot.current = null;
      shape.current = "";
      setCounts({ drawn: 0, held: 0 });
      return;
    }
    const buckets = Math.max(50, width - 60);
    bucketsRef.current = buckets;
    const build = () => buildChartData(series, buckets, view.current);
    const key = `${labels.join("|")}#${theme}#${width}#${height}`;
    let built = build();
    if (!plot.current || shape.current !== key) {
      plot.current?.destroy();
      const colors = PALETTE[theme];
      const axis = {
        stroke: cssVar("--muted"),
        grid: { stroke: cssVar("--grid"), width: 1 },
        ticks: { stroke: cssVar("--grid"), width: 1 },
        font: "11px system-ui, sans-serif",
      };
      const options: uPlot.Options = {
        width,
        height,
        legend: { show: false },
        cursor: {
          // Charts share the step axis: the cursor and a drag-zoom move them all together.
          sync: { key: SYNC_KEY },
          drag: { x: true, y: false },
          // uPlot's own double-click zooms out to the data it holds, which is only the view
          // once a zoom was downsampled again: zoom every chart out to everything instead.
          bind: { dblclick: () => () => (resetAll(), null) },
        },
        scales: { x: { time: false } },
        axes: [
          { ...axis, label: undefined, size: 30 },
          { ...axis, size: 52, values: (_u, ticks) => ticks.map((t) => tick(t)) },
        ],
        series: [
          { label: "step" },
          ...series.map((_s, i) => ({
            label: labels[i],
            stroke: colors[i % colors.length],
            width: 1.6,
            spanGaps: true,
            points: { size: points ? 5 : 4 },
            value: (_u: uPlot, v: number | null) => metric(v),
            scale: "y",
          })),
        ],
        hooks: {
          setScale: [
            (u, scale) => {
              if (scale !== "x") return;
              const x = u.scales.x;
              const full = fullRange(series);
              if (!x || !full || x.min === undefined || x.max === undefined || x.min === null || x.max === null) return;
              const whole = x.min <= full.min && x.max >= full.max;
              const next = whole ? null : { min: x.min, max: x.max };
              const current = view.current;
              if (next === current || (next && current && next.min === current.min && next.max === current.max)) return;
              view.current = next;
              // Downsample again for the new view: the points picked for the old one are too
              // coarse (zoom in) or miss what was outside it (zoom out).
              requestAnimationFrame(() => {
                if (plot.current !== u) return;
                built = build();
                u.setData(built.data as uPlot.AlignedData, view.current === null);
                setCounts({ drawn: built.drawn, held: built.held });
              });
            },
          ],
        },
      };
      view.current = null;
      built = build();
      plot.current = new uPlot(options, built.data as uPlot.AlignedData, element);
      shape.current = key;
    } else {
      plot.current.setData(built.data as uPlot.AlignedData, view.current === null);
    }
    setCounts({ drawn: built.drawn, held: built.held });
  }, [versions, labels.join("|"), theme, width, height, points]);

  const colors = PALETTE[theme];
  return (
    <section
      class="card chart-card"
      data-testid={`chart-${id}`}
      data-points={counts.drawn}
      data-held={counts.held}
      data-received={received}
      data-series={series.length}
    >
      <div class="card-head">
        <h2>{title}</h2>
        <div class="grow" />
        <div class="row wrap latest">
          {series.slice(0, 6).map((s, i) => (
            <span key={labels[i]} class="row nowrap" style={{ gap: "4px" }} title={`${s.task} · ${s.name}`}>
              <i style={{ width: "10px", height: "3px", background: colors[i % colors.length], display: "inline-block" }} />
              {labels[i]} <b class="num">{metric(latest[i])}</b>
            </span>
          ))}
          {series.length > 6 ? <span class="faint">+{series.length - 6}</span> : null}
        </div>
      </div>
      <div class="chart-box" style={{ height: `${height + 14}px` }}>
        <div ref={box} style={{ width: "100%", height: "100%" }} />
        {series.length === 0 ? (
          <div class="state compact">
            <span>{empty}</span>
          </div>
        ) : null}
      </div>
    </section>
  );
}
