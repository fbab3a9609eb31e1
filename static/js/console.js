// The console's own behaviour: the theme (before the first paint, so a dark page never flashes white), the
// collapsing menu, and the keyboard. Loaded in <head> without defer for the theme; the rest waits for the DOM.
(function () {
  var root = document.documentElement;
  var THEME_KEY = "fleetops-theme";

  // Theme: the system's setting unless the person chose one here (kept in this browser).
  function storedTheme() {
    try { return localStorage.getItem(THEME_KEY); } catch (e) { return null; }
  }
  function applyTheme(theme) {
    if (theme === "dark" || theme === "light") root.dataset.theme = theme;
    else delete root.dataset.theme;
  }
  function currentTheme() {
    if (root.dataset.theme) return root.dataset.theme;
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  applyTheme(storedTheme());
  root.classList.remove("no-js");
  root.classList.add("js");

  // Keys are the page's only where they would type nothing: not in a text field, a list or an editor. A checkbox
  // ticked on the board keeps j, k and a working.
  var NOT_TEXT = { checkbox: 1, radio: 1, button: 1, submit: 1, reset: 1 };
  function typing(target) {
    if (!target) return false;
    var tag = target.tagName;
    if (tag === "INPUT") return !NOT_TEXT[target.type];
    return tag === "TEXTAREA" || tag === "SELECT" || target.isContentEditable;
  }

  // The board's rows, in order, and the one j/k selected.
  // The board re-renders every few seconds: the selection is kept by the row's id and put back after each swap.
  var selectedId = null;
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("tr.incident-row")); }
  function selected() { return document.querySelector("tr.incident-row.selected"); }
  function mark(row) {
    row.classList.add("selected");
    row.setAttribute("aria-selected", "true");
  }
  function select(row) {
    var old = selected();
    if (old) { old.classList.remove("selected"); old.removeAttribute("aria-selected"); }
    selectedId = row ? row.id : null;
    if (!row) return;
    mark(row);
    row.scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("htmx:afterSettle", function () {
    var row = selectedId && document.getElementById(selectedId);
    if (row && !row.classList.contains("selected")) mark(row);
  });
  function step(by) {
    var all = rows();
    if (!all.length) return;
    var at = all.indexOf(selected());
    select(all[Math.max(0, Math.min(all.length - 1, at < 0 ? 0 : at + by))]);
  }
  function openSelected() {
    var row = selected(), link = row && row.querySelector("a.incident-link");
    if (link) window.location.href = link.href;
  }
  function acknowledgeSelected() {
    var row = selected(), button = row && row.querySelector("button.ack");
    if (button) button.click();
  }

  function toggleHelp(show) {
    var help = document.getElementById("keyboard-help");
    if (!help) return;
    if (show === undefined) show = help.hidden;
    help.hidden = !show;
    if (show) help.querySelector("button").focus();
  }

  var KEYS = {
    "/": function () { var box = document.getElementById("search-input"); if (box) { box.focus(); box.select(); } },
    "j": function () { step(1); },
    "k": function () { step(-1); },
    "o": openSelected,
    "Enter": openSelected,
    "a": acknowledgeSelected,
    "?": function () { toggleHelp(); },
  };

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") { toggleHelp(false); if (typing(event.target)) event.target.blur(); return; }
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    var action = KEYS[event.key];
    // Enter opens the selected row only when nothing else has the focus: on a button or a link it is theirs.
    var focused = document.activeElement;
    var free = !focused || focused === document.body || (focused.closest && focused.closest("tr.incident-row"));
    if (!action || (event.key === "Enter" && (!selected() || !free))) return;
    event.preventDefault();
    action();
  });

  // A card or table that scrolls sideways on a narrow screen can be scrolled from the keyboard too: it takes focus
  // and names itself after its heading (WCAG's scrollable-region-focusable).
  function scrollersFocusable(root) {
    (root || document).querySelectorAll(".card, .table-scroll").forEach(function (el) {
      var scrolls = el.scrollWidth > el.clientWidth + 1;
      if (scrolls && !el.hasAttribute("tabindex")) {
        el.setAttribute("tabindex", "0");
        el.dataset.scroller = "1";
        if (!el.getAttribute("aria-label") && !el.getAttribute("aria-labelledby")) {
          var heading = el.querySelector("h2, h3");
          el.setAttribute("role", "region");
          el.setAttribute("aria-label", heading ? heading.textContent.trim().slice(0, 80) : "scrollable table");
        }
      } else if (!scrolls && el.dataset.scroller) {
        el.removeAttribute("tabindex");
        delete el.dataset.scroller;
      }
    });
  }
  // The incident's less frequent actions fold away on a phone; on a wider screen they stay open.
  function unfoldOnWideScreens(root) {
    if (!window.matchMedia("(min-width: 901px)").matches) return;
    (root || document).querySelectorAll("details.more-actions").forEach(function (d) { d.open = true; });
  }
  document.addEventListener("DOMContentLoaded", function () { unfoldOnWideScreens(document); });
  document.addEventListener("htmx:afterSettle", function () { unfoldOnWideScreens(document); });
  window.addEventListener("load", function () { scrollersFocusable(document); });
  window.addEventListener("resize", function () { scrollersFocusable(document); });
  document.addEventListener("htmx:afterSettle", function () { scrollersFocusable(document); });

  document.addEventListener("DOMContentLoaded", function () {
    var menu = document.getElementById("menu-button"), nav = document.getElementById("main-nav");
    if (menu && nav) {
      menu.addEventListener("click", function () {
        var open = menu.getAttribute("aria-expanded") !== "true";
        menu.setAttribute("aria-expanded", open ? "true" : "false");
        nav.classList.toggle("open", open);
      });
    }
    var toggle = document.getElementById("theme-toggle");
    if (toggle) {
      var label = function () { toggle.textContent = currentTheme() === "dark" ? "Light mode" : "Dark mode"; };
      label();
      toggle.addEventListener("click", function () {
        var next = currentTheme() === "dark" ? "light" : "dark";
        applyTheme(next);
        try { localStorage.setItem(THEME_KEY, next); } catch (e) { /* private mode: this page only */ }
        label();
        document.dispatchEvent(new CustomEvent("fleetops:theme", { detail: next }));
      });
    }
    // The node grid shows one state at a time when asked: the rest fade, their places kept.
    var filter = document.getElementById("grid-filter");
    var showGrid = function () {
      var grid = document.getElementById("grid-racks"), pressed = filter && filter.querySelector('button.grid-show[aria-pressed="true"]');
      if (!grid || !pressed) return;
      var state = pressed.dataset.state, cls = state === "hot" ? "hot" : "s-" + state;
      if (state) grid.dataset.show = state; else delete grid.dataset.show;
      grid.querySelectorAll(state ? ".cell" : ".cell.faded").forEach(function (cell) {
        cell.classList.toggle("faded", !!state && !cell.classList.contains(cls));
      });
    };
    if (filter) {
      filter.addEventListener("click", function (event) {
        var button = event.target.closest("button.grid-show");
        if (!button) return;
        filter.querySelectorAll("button.grid-show").forEach(function (b) { b.setAttribute("aria-pressed", b === button ? "true" : "false"); });
        showGrid();
      });
    }
    // A large fleet's grid comes when it is scrolled to, and takes the state picked meanwhile. Fetched and put in
    // place here, not by htmx: htmx would walk its 16,384 cells for attributes they never carry (1.4 s of a phone).
    var later = document.querySelector("#grid-racks[data-grid-src]");
    if (later && "IntersectionObserver" in window) {
      var observer = new IntersectionObserver(function (entries) {
        if (!entries.some(function (entry) { return entry.isIntersecting; })) return;
        observer.disconnect();
        fetch(later.dataset.gridSrc, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
          .then(function (response) {
            if (!response.ok) throw new Error("HTTP " + response.status);
            return response.text();
          })
          .then(function (html) { later.outerHTML = html; showGrid(); })
          .catch(function (error) {
            later.insertAdjacentHTML("afterbegin", '<p class="banner warn">The grid did not load (' + String(error.message).replace(/[<>&]/g, "") + ").</p>");
          });
      });
      observer.observe(later);
    }
    var close = document.getElementById("keyboard-help-close");
    if (close) close.addEventListener("click", function () { toggleHelp(false); });
    // A row clicked is the row selected, so the keys go on from there.
    document.addEventListener("click", function (event) {
      var row = event.target.closest && event.target.closest("tr.incident-row");
      if (row) select(row);
    });
  });
})();
