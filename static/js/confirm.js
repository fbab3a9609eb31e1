// Asks before a consequential form is sent. With htmx loaded, htmx asks (hx-confirm); without it, this asks the
// same question. Forms without htmx say data-confirm. This replaces inline onsubmit/onclick handlers, which the
// Content-Security-Policy (script-src 'self') refuses to run.
(function () {
  function question(el) {
    if (!el || !el.getAttribute) return null;
    if (el.dataset.confirm) return el.dataset.confirm;
    return window.htmx ? null : el.getAttribute("hx-confirm");
  }
  document.addEventListener("submit", function (event) {
    var ask = question(event.submitter) || question(event.target);
    if (ask && !window.confirm(ask)) event.preventDefault();
  }, true);
})();
