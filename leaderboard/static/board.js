/* envsuite leaderboard page: sorting, filtering, the matrix tooltip and episode lists.
 *
 * Written for the page's static folder (file:// or any static host; no network, no libraries).
 * Data is only ever read from data-* attributes, textContent and the JSON block #episode-data, and
 * written with textContent and setAttribute: nothing from the store is parsed as HTML.
 */
(function () {
  "use strict";

  function each(list, fn) { Array.prototype.forEach.call(list, fn); }
  function headerRow(table) { return table.tHead.rows[table.tHead.rows.length - 1]; }

  /* ---- sorting: click a header of the last header row; numbers sort by data-sort ---- */
  function sortKey(cell) {
    if (!cell) { return ""; }
    var raw = cell.getAttribute("data-sort");
    if (raw !== null && raw !== "" && !isNaN(Number(raw))) { return Number(raw); }
    return cell.textContent.trim().toLowerCase();
  }
  function sortTable(table, col, dir) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = sortKey(a.cells[col]), y = sortKey(b.cells[col]);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      var c = x < y ? -1 : x > y ? 1 : 0;
      return dir === "asc" ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    each(headerRow(table).cells, function (th, i) {
      if (i === col) { th.setAttribute("aria-sort", dir === "asc" ? "ascending" : "descending"); }
      else { th.removeAttribute("aria-sort"); }
    });
  }
  each(document.querySelectorAll("table.sortable"), function (table) {
    each(headerRow(table).cells, function (th, col) {
      th.setAttribute("tabindex", "0");
      function toggle() {
        var numeric = th.classList.contains("num") || th.classList.contains("env");
        var current = th.getAttribute("aria-sort");
        var dir = current ? (current === "ascending" ? "desc" : "asc") : (numeric ? "desc" : "asc");
        sortTable(table, col, dir);
      }
      th.addEventListener("click", toggle);
      th.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { toggle(); } });
    });
  });

  /* ---- filters: rows and matrix columns carry data-family/-version/-partner/-model ---- */
  var filters = {};
  function matches(el) {
    for (var name in filters) {
      if (!filters[name]) { continue; }
      var value = el.getAttribute("data-" + name);
      if (value !== null && value !== filters[name]) { return false; }
    }
    return true;
  }
  function applyFilters() {
    each(document.querySelectorAll("[data-filter-row]"), function (row) { row.hidden = !matches(row); });
    each(document.querySelectorAll("[data-filter-col]"), function (cell) { cell.hidden = !matches(cell); });
    each(document.querySelectorAll("th.family"), function (th) {
      th.hidden = !!filters.family && th.getAttribute("data-family") !== filters.family;
    });
    each(document.querySelectorAll("[data-count-for]"), function (out) {
      var table = document.getElementById(out.getAttribute("data-count-for"));
      if (!table) { return; }
      var shown = 0;
      each(table.tBodies[0].rows, function (r) { if (!r.hidden) { shown += 1; } });
      out.textContent = shown + " of " + table.tBodies[0].rows.length + " rows";
    });
  }
  each(document.querySelectorAll("select[data-filter]"), function (select) {
    select.addEventListener("change", function () {
      filters[select.getAttribute("data-filter")] = select.value;
      applyFilters();
    });
    filters[select.getAttribute("data-filter")] = select.value;
  });
  // Only when a filter is already set (a browser restoring the form): otherwise every row is shown
  // as written, and touching thousands of rows would only slow the first paint.
  if (Object.keys(filters).some(function (k) { return filters[k]; })) { applyFilters(); }

  /* ---- the matrix tooltip: a cell's estimate and interval on hover or keyboard focus ---- */
  var tip = document.getElementById("tip");
  function showTip(cell) {
    if (!tip || !cell.hasAttribute("data-tip")) { return; }
    tip.textContent = cell.getAttribute("data-tip");
    tip.hidden = false;
    var box = cell.getBoundingClientRect();
    var left = Math.min(box.left, window.innerWidth - tip.offsetWidth - 8);
    var top = box.bottom + 6;
    if (top + tip.offsetHeight > window.innerHeight) { top = box.top - tip.offsetHeight - 6; }
    tip.style.left = Math.max(4, left) + "px";
    tip.style.top = Math.max(4, top) + "px";
  }
  function hideTip() { if (tip) { tip.hidden = true; } }
  each(document.querySelectorAll("[data-tip]"), function (cell) {
    cell.addEventListener("mouseenter", function () { showTip(cell); });
    cell.addEventListener("focus", function () { showTip(cell); });
    cell.addEventListener("mouseleave", hideTip);
    cell.addEventListener("blur", hideTip);
  });

  /* ---- episode lists: built when a row's list is first opened ---- */
  var dataNode = document.getElementById("episode-data");
  var episodes = dataNode ? JSON.parse(dataNode.textContent) : {};
  var prefix = document.body.getAttribute("data-root") || "";
  each(document.querySelectorAll("details.episodes"), function (details) {
    details.addEventListener("toggle", function () {
      if (!details.open || details.querySelector("ol")) { return; }
      var list = document.createElement("ol");
      (episodes[details.getAttribute("data-key")] || []).forEach(function (ep) {
        var item = document.createElement("li");
        var label = "seed " + ep[0] + (ep[1] > 1 ? " epoch " + ep[1] : "") + ": reward " + ep[2];
        if (ep[3]) {
          var link = document.createElement("a");
          link.setAttribute("href", prefix + ep[3]);
          link.textContent = label;
          item.appendChild(link);
        } else {
          item.textContent = label + " (no transcript)";
        }
        list.appendChild(item);
      });
      details.appendChild(list);
    });
  });

  /* ---- Inspect's viewer needs http(s): say so when the page is opened as a file ---- */
  if (window.location.protocol === "file:") {
    each(document.querySelectorAll(".file-notice"), function (n) { n.hidden = false; });
  }

  /* ---- "#sort=<table id>:<column>:<asc|desc>" picks an initial order (shareable views) ---- */
  var m = /^#sort=([A-Za-z0-9_-]+):(\d+):(asc|desc)$/.exec(window.location.hash);
  if (m) {
    var t = document.getElementById(m[1]);
    if (t && t.classList.contains("sortable")) { sortTable(t, parseInt(m[2], 10), m[3]); }
  }
  // When the page became usable, in ms since navigation started (read by bench/leaderboard_load.py).
  document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
  document.body.setAttribute("data-ready", "1");
})();
