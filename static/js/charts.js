// Draws every [data-figure] element from the JSON figure in the <script> it names; again after htmx swaps.
(function () {
  function render(root) {
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source || !window.Plotly) return;
      var figure = JSON.parse(source.textContent);
      window.Plotly.react(el, figure.data, figure.layout, { displaylogo: false, responsive: true });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { render(document); });
  document.addEventListener("htmx:afterSettle", function (event) { render(event.detail.elt); });
})();
