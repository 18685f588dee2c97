// The learner's own grades on the course site.
//
// `bertlab grade` writes progress.json (and failure heatmaps under progress/) into the built
// site, so this script reads them at page load: a refresh shows the latest grades, no rebuild.
// Every page gets a score badge beside each exercise in the navigation (and in the home page's
// table); the Progress page (an element #bertlab-progress) gets the full table. Text from the
// file is only ever set as text, never parsed as HTML.
(function () {
  "use strict";

  // The site root, from the base URL Material writes into every page (relative to the page).
  function siteRoot() {
    let base = ".";
    const config = document.getElementById("__config");
    try {
      base = JSON.parse(config.textContent).base || ".";
    } catch (err) {
      // no Material config: assume the page sits at the root
    }
    return new URL(base.replace(/\/?$/, "/"), window.location.href);
  }

  async function load(root) {
    try {
      const response = await fetch(new URL("progress.json", root), { cache: "no-store" });
      return response.ok ? await response.json() : null;
    } catch (err) {
      return null; // not served over HTTP, or the file is being replaced: same as not graded
    }
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function fraction(value) {
    return Number.isInteger(value) ? String(value) : Number(value).toFixed(1);
  }

  // passed: every point; partial: some; failed: none.
  function level(task) {
    if (task.max_score > 0 && task.score >= task.max_score) return "passed";
    return task.score > 0 ? "partial" : "failed";
  }

  function badge(task) {
    const node = element("span", "bertlab-badge bertlab-badge--" + level(task),
      fraction(task.score) + "/" + fraction(task.max_score));
    node.title = task.task + ": " + task.status + ", graded " + new Date(task.graded_at).toLocaleString();
    return node;
  }

  // The task folder ("03-self-attention") a link to an exercise page points at, or null.
  function taskOf(href, root) {
    const path = new URL(href, window.location.href).pathname;
    const prefix = root.pathname + "exercises/";
    if (!path.startsWith(prefix)) return null;
    return decodeURIComponent(path.slice(prefix.length).split("/")[0]) || null;
  }

  function addBadges(data, root) {
    const byTask = new Map(data.tasks.map((task) => [task.task, task]));
    document.querySelectorAll("nav.md-nav a.md-nav__link[href]").forEach((link) => {
      const task = byTask.get(taskOf(link.getAttribute("href"), root));
      if (task && !link.querySelector(".bertlab-badge")) link.appendChild(badge(task));
    });
    // The home page's course table: the badge goes into the row's last cell ("Grade it").
    document.querySelectorAll(".md-typeset table tr").forEach((row) => {
      const link = row.querySelector('a[href*="exercises/"]');
      const task = link && byTask.get(taskOf(link.getAttribute("href"), root));
      const cell = row.lastElementChild;
      if (task && cell && !cell.querySelector(".bertlab-badge")) cell.appendChild(badge(task));
    });
  }

  function notGraded(container) {
    container.replaceChildren();
    const note = element("div", "admonition note");
    note.appendChild(element("p", "admonition-title", "Not graded yet"));
    const text = element("p", null, "Not graded yet: run ");
    text.appendChild(element("code", null, "bertlab grade"));
    text.appendChild(document.createTextNode(" in the course directory, then refresh this page."));
    note.appendChild(text);
    container.appendChild(note);
  }

  function messageCell(task) {
    const cell = element("td", "bertlab-progress__message");
    const lines = (task.message || "").split("\n");
    cell.appendChild(element("span", null, lines[0]));
    if (lines.length > 1) {
      const more = element("details");
      more.appendChild(element("summary", null, "full message"));
      more.appendChild(element("pre", null, task.message));
      cell.appendChild(more);
    }
    return cell;
  }

  // The failure's heatmap, in a row of its own under the task's, as wide as the table.
  function heatmapRow(task, root) {
    const row = element("tr", "bertlab-progress__figure");
    row.dataset.heatmapOf = task.task;
    const cell = element("td");
    cell.colSpan = 5;
    const src = new URL(task.heatmap, root);
    src.searchParams.set("t", task.graded_at); // a regrade's picture, not the cached one
    const link = element("a");
    link.href = src.href;
    const image = element("img");
    image.src = src.href;
    image.alt = task.task + ": |got - expected| where the values differ";
    link.appendChild(image);
    cell.appendChild(link);
    row.appendChild(cell);
    return row;
  }

  function render(container, data, root) {
    container.replaceChildren();
    const graded = data.graded_at ? new Date(data.graded_at).toLocaleString() : "";
    container.appendChild(element("p", "bertlab-progress__total",
      "Total: " + fraction(data.score) + "/" + fraction(data.max_score) + " points (last graded " + graded + ")."));
    // No class on the table itself: Material styles content tables that have none.
    const table = element("table");
    const head = table.createTHead().insertRow();
    ["Task", "Score", "Status", "First failure", "Lesson section"].forEach((title) => {
      head.appendChild(element("th", null, title));
    });
    const body = table.createTBody();
    data.tasks.forEach((task) => {
      const row = body.insertRow();
      row.dataset.task = task.task;
      const name = element("td", "bertlab-progress__task");
      const link = element("a", null, task.task);
      link.href = new URL(task.exercise, root).href;
      name.appendChild(link);
      row.appendChild(name);
      const score = element("td");
      score.appendChild(badge(task));
      row.appendChild(score);
      row.appendChild(element("td", null, task.status));
      row.appendChild(level(task) === "passed" ? element("td", null, task.message) : messageCell(task));
      const lesson = element("td");
      if (task.lesson) {
        const page = task.lesson.replace(/^lessons\//, "").replace(/\/#.*$/, "");
        const anchor = element("a", null, page + (task.section ? ": " + task.section : ""));
        anchor.href = new URL(task.lesson, root).href;
        lesson.appendChild(anchor);
      }
      row.appendChild(lesson);
      if (task.heatmap) body.appendChild(heatmapRow(task, root));
    });
    // Material's wrapper for content tables: horizontal scrolling on narrow screens.
    const wrapper = element("div", "md-typeset__scrollwrap");
    const inner = element("div", "md-typeset__table");
    inner.appendChild(table);
    wrapper.appendChild(inner);
    container.appendChild(wrapper);
  }

  // The learner's answers to the lessons' questions, kept in this browser by predictions.js (the
  // same key and layout: {lesson: {question: {chosen, right, at}}}); the list of every lesson's
  // questions comes from the page itself (hooks/predictions.py), so this works from files too.
  const ANSWERS = "bertlab.answers.v1";

  function storedAnswers() {
    try {
      const data = JSON.parse(window.localStorage.getItem(ANSWERS) || "{}");
      return data && typeof data === "object" ? data : {};
    } catch (err) {
      return {};
    }
  }

  function lessonHref(url, root) {
    const href = new URL(url, root);
    // Read as files, a folder's address shows a listing, not its page.
    if (href.protocol === "file:" && href.pathname.endsWith("/")) href.pathname += "index.html";
    return href.href;
  }

  function renderAnswers(container, root) {
    const index = document.getElementById("bertlab-answers-index");
    let lessons = [];
    try {
      lessons = JSON.parse(index.textContent);
    } catch (err) {
      lessons = [];
    }
    const answers = storedAnswers();
    container.replaceChildren();
    const table = element("table");
    const head = table.createTHead().insertRow();
    ["Lesson", "Predictions answered", "Check yourself answered", "Right first time"].forEach((title) => {
      head.appendChild(element("th", null, title));
    });
    const body = table.createTBody();
    let answeredAll = 0;
    lessons.forEach((lesson) => {
      const kept = answers[lesson.lesson] || {};
      const names = Object.keys(lesson.questions);
      const count = (kind) => names.filter((n) => lesson.questions[n] === kind).length;
      const done = (kind) => names.filter((n) => lesson.questions[n] === kind && kept[n]).length;
      const right = names.filter((n) => kept[n] && kept[n].right).length;
      const answered = done("predict") + done("check");
      answeredAll += answered;
      const row = body.insertRow();
      row.dataset.lesson = lesson.lesson;
      const name = element("td");
      const link = element("a", null, lesson.title);
      link.href = lessonHref(lesson.url, root);
      name.appendChild(link);
      row.appendChild(name);
      row.appendChild(element("td", null, done("predict") + " of " + count("predict")));
      row.appendChild(element("td", null, done("check") + " of " + count("check")));
      row.appendChild(element("td", null, answered ? right + " of " + answered : "-"));
    });
    const wrapper = element("div", "md-typeset__scrollwrap");
    const inner = element("div", "md-typeset__table");
    inner.appendChild(table);
    wrapper.appendChild(inner);
    container.appendChild(wrapper);
    const reset = element("button", "md-button", "Forget my answers");
    reset.type = "button";
    reset.disabled = answeredAll === 0;
    reset.addEventListener("click", () => {
      try {
        window.localStorage.removeItem(ANSWERS);
      } catch (err) {
        // storage disabled: nothing was kept
      }
      renderAnswers(container, root);
    });
    container.appendChild(reset);
  }

  async function main() {
    const root = siteRoot();
    const answers = document.getElementById("bertlab-answers");
    if (answers) renderAnswers(answers, root);
    const container = document.getElementById("bertlab-progress");
    const data = await load(root);
    if (!data || !Array.isArray(data.tasks) || data.tasks.length === 0) {
      if (container) notGraded(container);
      return;
    }
    addBadges(data, root);
    if (container) render(container, data, root);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", main);
  } else {
    main();
  }
})();
