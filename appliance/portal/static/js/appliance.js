/* The portal's small enhancements, served locally (no inline script: the Content-Security-Policy forbids it).
 * - the menu <details> stays open at wide widths (CSS does it too where ::details-content is supported);
 * - every table scrolls inside a focusable, labelled region, so it never widens the page and a keyboard
 *   user can scroll it;
 * - a table with a header row sorts by any column: a button in each header, aria-sort on the sorted one;
 * - a <pre> that scrolls can be focused.
 * Content that htmx swaps in gets the same treatment. Without script the pages still work; tables then
 * scroll inside their cards and do not sort. */
(function () {
  "use strict";

  var WIDE = window.matchMedia("(min-width: 900px)");
  var usedLabels = {};

  function keepMenuOpenWhenWide() {
    document.querySelectorAll("details[data-navmenu]").forEach(function (menu) {
      menu.open = WIDE.matches;
    });
  }

  function text(node) {
    return (node && node.textContent || "").replace(/\s+/g, " ").trim();
  }

  function headingBefore(table) {
    if (table.caption) return text(table.caption);
    if (table.getAttribute("aria-label")) return table.getAttribute("aria-label");
    for (var node = table; node && node !== document.body; node = node.parentElement) {
      for (var sibling = node.previousElementSibling; sibling; sibling = sibling.previousElementSibling) {
        if (/^H[1-6]$/.test(sibling.tagName) || sibling.tagName === "SUMMARY") return text(sibling);
        var inner = sibling.querySelector && sibling.querySelector("h1, h2, h3, h4, h5, h6");
        if (inner) return text(inner);
      }
    }
    return "";
  }

  function uniqueLabel(label) {
    label = (label || document.title.split(" · ")[0] || "Table").slice(0, 80);
    var count = (usedLabels[label] || 0) + 1;
    usedLabels[label] = count;
    return count > 1 ? label + " (" + count + ")" : label;
  }

  function wrapTable(table) {
    if (table.closest(".table-scroll") || table.dataset.wrap === "off") return;
    var wrapper = document.createElement("div");
    wrapper.className = "table-scroll";
    wrapper.setAttribute("role", "region");
    wrapper.setAttribute("tabindex", "0");
    wrapper.setAttribute("aria-label", uniqueLabel(headingBefore(table)));
    table.parentNode.insertBefore(wrapper, table);
    wrapper.appendChild(table);
  }

  function sortKey(cell) {
    var raw = cell.getAttribute("data-sort-value");
    var value = raw !== null ? raw : text(cell);
    var number = /^[-+]?\d[\d\u00a0 ,]*(\.\d+)?/.exec(value);
    if (number && !/^\d{4}-\d{2}-\d{2}/.test(value)) {
      return {number: parseFloat(number[0].replace(/[\u00a0 ,]/g, "")), text: value};
    }
    return {number: null, text: value};
  }

  function compare(a, b) {
    if (a.number !== null && b.number !== null) return a.number - b.number;
    if (a.number !== null) return -1;
    if (b.number !== null) return 1;
    return a.text.localeCompare(b.text, undefined, {numeric: true, sensitivity: "base"});
  }

  function sortBy(table, header, index) {
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    table.tHead.querySelectorAll("th[aria-sort]").forEach(function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (x, y) {
      var order = compare(sortKey(x.cells[index]), sortKey(y.cells[index]));
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  function sortable(table) {
    if (table.dataset.sort === "off" || table.dataset.sortReady) return false;
    if (!table.tHead || table.tHead.rows.length !== 1 || table.tBodies.length !== 1) return false;
    var rows = table.tBodies[0].rows;
    if (rows.length < 2) return false;
    var width = table.tHead.rows[0].cells.length;
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].cells.length !== width) return false;
      for (var j = 0; j < rows[i].cells.length; j++) {
        if (rows[i].cells[j].colSpan > 1 || rows[i].cells[j].rowSpan > 1) return false;
      }
    }
    return true;
  }

  function makeSortable(table) {
    if (!sortable(table)) return;
    table.dataset.sortReady = "1";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, index) {
      if (header.colSpan > 1 || !text(header) || header.querySelector("a, button, input, select")) return;
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      while (header.firstChild) button.appendChild(header.firstChild);
      header.appendChild(button);
      button.addEventListener("click", function () { sortBy(table, header, index); });
    });
  }

  function focusableWhenScrolling(root) {
    root.querySelectorAll("pre").forEach(function (pre) {
      if (pre.hasAttribute("tabindex")) return;
      if (pre.scrollWidth > pre.clientWidth || pre.scrollHeight > pre.clientHeight) {
        pre.setAttribute("tabindex", "0");
      }
    });
  }

  function enhance(root) {
    if (!root || !root.querySelectorAll) return;
    var tables = root.tagName === "TABLE" ? [root] : root.querySelectorAll("table");
    Array.prototype.forEach.call(tables, function (table) {
      wrapTable(table);
      makeSortable(table);
    });
    focusableWhenScrolling(root);
  }

  function start() {
    keepMenuOpenWhenWide();
    if (WIDE.addEventListener) WIDE.addEventListener("change", keepMenuOpenWhenWide);
    enhance(document.body);
    document.body.addEventListener("htmx:load", function (event) { enhance(event.target); });
    document.addEventListener("toggle", function (event) {
      if (event.target.tagName === "DETAILS") focusableWhenScrolling(event.target);
    }, true);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
}());
