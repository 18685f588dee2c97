// MathJax 3, served by the site itself (docs/hooks/mathjax.py copies it in): no CDN is reachable.
// Lessons are notebooks whose markdown cells keep their raw $...$ and $$...$$ (arithmatex never
// sees them); plain pages use arithmatex's \( \) and \[ \] spans. Typeset those two places only,
// so a "$" in code, program output or prose elsewhere is never taken for math. (Material's usual
// ignoreHtmlClass ".*|" would skip the <p> inside a notebook cell, hence startup.elements.)
window.MathJax = {
  tex: {
    inlineMath: [["$", "$"], ["\\(", "\\)"]],
    displayMath: [["$$", "$$"], ["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  startup: {
    elements: [".arithmatex", ".jp-RenderedMarkdown"],
  },
};
