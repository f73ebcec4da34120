// The job page's charts: the catalogue's charts with the series each draws.
import { chooseCharts, emptyNote, seriesLabel } from "../data/jobCharts";
import type { Series } from "../data/series";
import { MetricChart } from "./MetricChart";

/** `series` sorted by name then task; `historyDone` once the stream replayed what was stored. */
export function JobCharts({ series, historyDone, finished }: { series: Series[]; historyDone: boolean; finished: boolean }) {
  const names = series.map((s) => s.name);
  return (
    <div class="charts" data-testid="charts">
      {chooseCharts(series).map((choice) => (
        <MetricChart
          key={choice.spec.id}
          id={choice.spec.id}
          title={choice.spec.title}
          series={choice.list}
          label={seriesLabel(choice)}
          empty={emptyNote(choice.spec, names, historyDone, finished)}
          points={choice.spec.points}
        />
      ))}
    </div>
  );
}
