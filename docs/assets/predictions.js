// The lessons' questions (forms .bertlab-predict, written by hooks/predictions.py): the learner
// picks an option and commits; only then the page shows every option's explanation, the right
// one marked, and where to read on. The first answer to each question is kept in this browser's
// localStorage (nothing leaves the machine), so a reload shows it again and the Progress page
// (assets/progress.js) can count the answers. Works over http and from files (file://).
(function () {
  "use strict";

  // The same key and layout as progress.js: {lesson: {question: {chosen, right, at}}}.
  const KEY = "bertlab.answers.v1";

  function loadAnswers() {
    try {
      const data = JSON.parse(window.localStorage.getItem(KEY) || "{}");
      return data && typeof data === "object" ? data : {};
    } catch (err) {
      return {}; // storage disabled or unreadable: the questions still work, unrecorded
    }
  }

  function saveAnswer(lesson, name, answer) {
    const data = loadAnswers();
    data[lesson] = data[lesson] || {};
    if (data[lesson][name]) return data[lesson][name]; // the first answer is the one that counts
    data[lesson][name] = answer;
    try {
      window.localStorage.setItem(KEY, JSON.stringify(data));
    } catch (err) {
      // storage full or disabled: the answer is shown, not kept
    }
    return answer;
  }

  function reveal(form, answer) {
    const right = form.dataset.right === "" ? null : Number(form.dataset.right);
    form.querySelectorAll("input[type=radio]").forEach((input) => {
      input.checked = Number(input.value) === answer.chosen;
      input.disabled = true;
    });
    form.querySelectorAll(".bertlab-predict__option").forEach((item) => {
      const i = Number(item.dataset.option);
      item.classList.toggle("bertlab-predict__option--chosen", i === answer.chosen);
      item.classList.toggle("bertlab-predict__option--right", i === right);
      const explain = item.querySelector(".bertlab-predict__explain");
      if (explain) explain.hidden = false;
    });
    const button = form.querySelector("button[type=submit]");
    if (button) button.hidden = true;
    const labels = Array.from(form.querySelectorAll(".bertlab-predict__option label")).map((l) => l.textContent.trim());
    const verdict = form.querySelector(".bertlab-predict__verdict");
    if (right === null) {
      verdict.textContent = "You answered: " + labels[answer.chosen] + ".";
    } else if (answer.chosen === right) {
      verdict.textContent = "Right: " + labels[right] + ". Each option's explanation is below it.";
    } else {
      verdict.textContent = "You answered: " + labels[answer.chosen] + ". The measurement says: " +
        labels[right] + ". Each option's explanation is below it.";
    }
    form.classList.add("bertlab-predict--answered");
    form.classList.toggle("bertlab-predict--right", answer.chosen === right);
    form.querySelector(".bertlab-predict__answer").hidden = false;
    form.querySelector(".bertlab-predict__status").textContent = "";
  }

  function setUp(form) {
    const lesson = form.dataset.lesson;
    const name = form.dataset.name;
    const kept = (loadAnswers()[lesson] || {})[name];
    if (kept && Number.isInteger(kept.chosen)) reveal(form, kept);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const picked = form.querySelector("input[type=radio]:checked");
      if (!picked) {
        form.querySelector(".bertlab-predict__status").textContent = "Pick an option first.";
        return;
      }
      const chosen = Number(picked.value);
      const right = form.dataset.right === "" ? null : Number(form.dataset.right);
      const answer = saveAnswer(lesson, name, {
        chosen: chosen,
        right: chosen === right,
        kind: form.dataset.kind,
        at: new Date().toISOString(),
      });
      reveal(form, answer);
    });
  }

  function main() {
    document.querySelectorAll("form.bertlab-predict").forEach(setUp);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", main);
  } else {
    main();
  }
})();
