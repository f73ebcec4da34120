// Jobs: the list (live from the cluster stream, refetched when events say it changed), a
// status filter, a search (name and description; `tag:x` for a tag), the jobs selected to
// compare, and the submit form.
import { useEffect, useState } from "preact/hooks";
import { Empty, ErrorState, Loading } from "../components/common";
import { JobRow } from "../components/JobRow";
import { SubmitForm } from "../components/SubmitForm";
import { emptyList, FILTERS, type Filter } from "../data/jobFilters";
import { useJobSearch } from "../hooks/useJobSearch";
import { useJobsList } from "../hooks/useJobsList";
import { useNow, useSubscription } from "../ui/hooks";
import { saveFilter, savedFilter, savedFormChoice, saveFormChoice } from "../ui/jobsPrefs";
import { currentProject, onProjectChange } from "../ui/project";
import { href, navigate } from "../ui/router";

export function JobsPage() {
  const [filter, setFilter] = useState<Filter>(savedFilter);
  const { text: searchText, search, type, searchFor } = useJobSearch();
  useSubscription(onProjectChange);
  const project = currentProject();
  const { page, error, load } = useJobsList(filter, search, project);
  useEffect(() => saveFilter(filter), [filter]);
  // The form opens by itself while there are no jobs; after that it is the user's choice.
  const [formChoice, setFormChoice] = useState<boolean | null>(savedFormChoice);
  const showForm = formChoice ?? (page !== null && page.total === 0 && filter === "all");
  const toggleForm = () => {
    setFormChoice(!showForm);
    saveFormChoice(!showForm);
  };
  const now = useNow(1000);
  const [picked, setPicked] = useState<number[]>([]);
  const togglePick = (id: number) => setPicked((ids) => (ids.includes(id) ? ids.filter((i) => i !== id) : [...ids, id]));

  const jobs = page?.items ?? [];
  const empty = emptyList(filter, project);
  return (
    <div data-testid="jobs-page">
      <div class="page-head">
        <h1>Jobs</h1>
        {page ? <span class="count" data-testid="jobs-total">{page.total}</span> : null}
        <div class="segmented" role="group" aria-label="Filter by status" data-testid="status-filter">
          {FILTERS.map((f) => (
            <button
              type="button"
              key={f.id}
              class={filter === f.id ? "on" : ""}
              onClick={() => setFilter(f.id)}
              data-testid={`filter-${f.id}`}
              aria-pressed={filter === f.id}
            >
              {f.label}
            </button>
          ))}
        </div>
        <input
          type="search"
          class="jobs-search"
          placeholder="Search, or tag:name"
          value={searchText}
          onInput={(e) => type((e.target as HTMLInputElement).value)}
          aria-label="Search jobs by name and description, or tag:name"
          data-testid="jobs-search"
        />
        <div class="grow" />
        <button
          type="button"
          disabled={picked.length < 2}
          onClick={() => navigate(href.compare([...picked].sort((a, b) => a - b)))}
          title={picked.length < 2 ? "Tick two or more jobs to compare them" : "Their curves on the same charts, and how their specs differ"}
          data-testid="compare-selected"
        >
          Compare{picked.length ? ` (${picked.length})` : ""}
        </button>
        <button type="button" class={showForm ? "" : "primary"} onClick={toggleForm} data-testid="toggle-submit" aria-expanded={showForm}>
          {showForm ? "Hide form" : "+ New job"}
        </button>
      </div>
      <div class={`jobs-layout${showForm ? " with-form" : ""}`}>
        <section class="card">
          {error && !page ? (
            <ErrorState title="Jobs could not be loaded" detail={error.detail} retry={() => void load()} />
          ) : !page ? (
            <Loading what="jobs" />
          ) : jobs.length === 0 ? (
            search ? (
              <Empty title="No job matches the search">Search matches names and descriptions; tag:name matches a tag.</Empty>
            ) : (
              <Empty title={empty.title}>{empty.hint}</Empty>
            )
          ) : (
            <div class="table-scroll">
              <table class="data" data-testid="jobs-table">
                <thead>
                  <tr>
                    <th class="pick" title="Tick jobs to compare them" />
                    <th>ID</th>
                    <th>Name</th>
                    <th>Project</th>
                    <th>Status</th>
                    <th title="Steps done, and the time left at the current rate">Progress</th>
                    <th>Strategy</th>
                    <th>Replicas</th>
                    <th title="Job restarts">Restarts</th>
                    <th>Age</th>
                  </tr>
                </thead>
                <tbody>
                  {jobs.map((job) => (
                    <JobRow
                      key={job.id}
                      job={job}
                      now={now}
                      picked={picked.includes(job.id)}
                      onPick={() => togglePick(job.id)}
                      onTag={(tag) => searchFor(`tag:${tag}`)}
                    />
                  ))}
                </tbody>
              </table>
            </div>
          )}
          {error && page ? <div class="notice" style={{ margin: "10px" }}>Refresh failed: {error.detail}</div> : null}
          {page && page.total > jobs.length ? (
            <div class="state compact faint">Showing the newest {jobs.length} of {page.total}.</div>
          ) : null}
        </section>
        {showForm ? <SubmitForm onSubmitted={(job) => navigate(href.job(job.id))} /> : null}
      </div>
    </div>
  );
}
