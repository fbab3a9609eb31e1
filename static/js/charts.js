// Draws every [data-figure] element from the JSON figure in the <script> it names; again after htmx swaps, and when
// the theme changes (the axes and text take the page's colours). Charts follow their container's width.
(function () {
  function themed(layout) {
    var style = getComputedStyle(document.documentElement);
    var fg = style.getPropertyValue("--fg").trim(), line = style.getPropertyValue("--line").trim();
    var axis = { color: fg, gridcolor: line, linecolor: line, zerolinecolor: line, automargin: true };
    var out = Object.assign({}, layout, {
      autosize: true,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: Object.assign({}, layout.font || {}, { color: fg }),
    });
    delete out.width;
    Object.keys(layout).forEach(function (key) {
      if (/^[xy]axis\d*$/.test(key)) out[key] = Object.assign({}, layout[key], axis);
    });
    if (!layout.xaxis) out.xaxis = axis;
    if (!layout.yaxis) out.yaxis = axis;
    if (layout.legend) out.legend = Object.assign({}, layout.legend, { font: { color: fg } });
    return out;
  }
  function render(root) {
    if (!window.Plotly) return;
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source) return;
      var figure = JSON.parse(source.textContent);
      window.Plotly.react(el, figure.data, themed(figure.layout || {}), { displaylogo: false, responsive: true });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { render(document); });
  document.addEventListener("htmx:afterSettle", function (event) { render(event.detail.elt); });
  document.addEventListener("fleetops:theme", function () { render(document); });
  if (window.matchMedia) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", function () { render(document); });
  }
})();
