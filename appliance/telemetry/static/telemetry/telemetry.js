/* The telemetry pages' charts, drawn in the browser from the appliance's own API (no inline script: the
 * Content-Security-Policy forbids it; no CDN: appliances run air-gapped).
 * - time series with uPlot (vendor/uPlot.iife.min.js), one chart per <figure data-chart="...">;
 * - the nodes x time heatmap on a canvas of our own (uPlot draws lines, not heatmaps);
 * - the live grid (every GPU's newest minute) as a table of links, shaded by class, the number written in
 *   each cell so it reads without colour.
 * A container [data-telemetry] names its kind and its API URL; texts come translated from #telemetry-text.
 * Every chart that has nothing to draw says why (no collector, collector silent since ..., nothing in range).
 * Times read as the portal writes them: ISO 8601, 24 hours, in the portal's zone (#telemetry-text's data-zone),
 * whatever the browser's locale and zone. */
(function () {
  "use strict";

  var PALETTE = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563",
                 "#65a30d", "#9333ea", "#ea580c", "#0d9488"];
  var TEXT = {};

  function readTexts() {
    var holder = document.getElementById("telemetry-text");
    if (!holder) return;
    Object.keys(holder.dataset).forEach(function (key) { TEXT[key] = holder.dataset[key]; });
  }

  // --- numbers with units ---------------------------------------------------------------------------

  function fixed(value, digits) {
    return Number(value).toLocaleString(undefined, {maximumFractionDigits: digits, minimumFractionDigits: 0});
  }

  function scaled(value, units, base) {
    if (value === null || value === undefined || isNaN(value)) return "—";
    var i = 0;
    var v = Math.abs(value);
    while (v >= base && i < units.length - 1) { v /= base; i += 1; }
    var digits = v >= 100 ? 0 : v >= 10 ? 1 : 2;
    return (value < 0 ? "-" : "") + fixed(v, digits) + " " + units[i];
  }

  var FORMAT = {
    percent: function (v) { return v === null || v === undefined ? "—" : fixed(v, 1) + " %"; },
    ratio: function (v) { return v === null || v === undefined ? "—" : fixed(v * 100, 1) + " %"; },
    bytes: function (v) { return scaled(v, ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"], 1000); },
    mib: function (v) { return scaled(v, ["MiB", "GiB", "TiB"], 1024); },
    watts: function (v) { return scaled(v, ["W", "kW", "MW"], 1000); },
    celsius: function (v) { return v === null || v === undefined ? "—" : fixed(v, 1) + " °C"; },
    mhz: function (v) { return v === null || v === undefined ? "—" : fixed(v, 0) + " MHz"; },
    count: function (v) { return v === null || v === undefined ? "—" : fixed(v, 0); }
  };

  function age(seconds) {
    if (seconds === null || seconds === undefined) return "";
    if (seconds < 120) return seconds + " s";
    if (seconds < 7200) return Math.round(seconds / 60) + " min";
    if (seconds < 172800) return Math.round(seconds / 3600) + " h";
    return Math.round(seconds / 86400) + " d";
  }

  // --- times in the portal's zone ------------------------------------------------------------------

  /* A Date whose local fields are the wall-clock time in the portal's zone at epoch second `ts` (what
   * uPlot's axes read); the browser's own zone is not used. */
  function zoned(ts) {
    var when = new Date(ts * 1000);
    if (!TEXT.zone || !window.uPlot || !window.uPlot.tzDate) return when;
    try { return window.uPlot.tzDate(when, TEXT.zone); } catch (e) { return when; }
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function isoDay(d) { return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()); }

  function isoMinute(d) { return pad(d.getHours()) + ":" + pad(d.getMinutes()); }

  /* "2026-12-07 17:52 UTC": the portal's own format (appliance_format's |when:"minutes"). */
  function isoTime(ts) {
    var d = zoned(ts);
    return isoDay(d) + " " + isoMinute(d) + (TEXT.zoneName ? " " + TEXT.zoneName : "");
  }

  function localTime(iso) {
    return iso ? isoTime(new Date(iso).getTime() / 1000) : "";
  }

  /* uPlot's time axis labels, ISO and 24-hour: [minimum step, label, then the label where the year, month,
   * day, hour, minute, second changed (null: the label), mode]. */
  var DAY = 86400;
  var TIME_AXIS = [
    [DAY * 365, "{YYYY}", null, null, null, null, null, null, 1],
    [DAY * 28, "{YYYY}-{MM}", "\n{YYYY}", null, null, null, null, null, 1],
    [DAY, "{MM}-{DD}", "\n{YYYY}", null, null, null, null, null, 1],
    [60, "{HH}:{mm}", "\n{YYYY}-{MM}-{DD}", null, "\n{YYYY}-{MM}-{DD}", null, null, null, 1]
  ];
  // The series are per minute or per hour: no tick between two minutes (15 s ticks crowd a 390 px chart).
  var TIME_STEPS = [60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, DAY, 2 * DAY, 7 * DAY, 28 * DAY,
                    365 * DAY];

  function whyNoData(collector) {
    if (!collector) return TEXT.empty;
    if (collector.state === "not deployed") return TEXT.notDeployed;
    if (collector.state === "silent") {
      if (!collector.last_bucket) return TEXT.never;
      return TEXT.silent + " " + localTime(collector.last_bucket) + " (" + age(collector.age_s) + " " + TEXT.ago + ").";
    }
    return TEXT.empty;
  }

  // --- DOM helpers -----------------------------------------------------------------------------------

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "className") node.className = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) { if (child) node.appendChild(child); });
    return node;
  }

  function part(root, name) { return root.querySelector('[data-part="' + name + '"]'); }

  function setStatus(root, message, bad) {
    var status = part(root, "status");
    if (!status) return;
    status.textContent = message || "";
    status.hidden = !message;
    status.classList.toggle("bad", !!bad);
  }

  function getJSON(url) {
    return fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}}).then(function (r) {
      if (!r.ok) {
        return r.json().catch(function () { return {}; }).then(function (body) {
          var message = body && body.error ? body.error.message : "";
          throw new Error("HTTP " + r.status + (message ? ": " + message : ""));
        });
      }
      return r.json();
    });
  }

  // --- time series (uPlot) ---------------------------------------------------------------------------

  var charts = [];
  var MIB_STEPS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512].map(function (m) { return m * 1024; })
    .concat([1, 2, 4, 8, 16].map(function (m) { return m * 1024 * 1024; }));

  function chartWidth(body) {
    return Math.max(200, Math.floor(body.getBoundingClientRect().width) || 300);
  }

  /* series: [{label, values, format}]; every series of one chart shares a unit (its format). */
  function lineChart(root, name, t, series, emptyMessage) {
    var figure = root.querySelector('[data-chart="' + name + '"]');
    if (!figure) return;
    var body = figure.querySelector(".chart-body");
    var previous = figure.querySelector(".chart-latest");
    if (previous) previous.remove();
    if (body.uplot) {  // a refresh: the old chart goes, with its resize entry
      body.uplot.destroy();
      charts = charts.filter(function (c) { return c.body !== body; });
      body.uplot = null;
    }
    body.textContent = "";
    var drawn = series.filter(function (s) { return s.values.some(function (v) { return v !== null && v !== undefined; }); });
    if (!t.length || !drawn.length || typeof window.uPlot !== "function") {
      body.appendChild(el("p", {className: "empty chart-empty", "data-testid": "chart-empty", text: emptyMessage}));
      figure.dataset.state = "empty";
      return;
    }
    var format = drawn[0].format || FORMAT.count;
    var newest = drawn.map(function (s) {
      for (var i = s.values.length - 1; i >= 0; i -= 1) if (s.values[i] !== null && s.values[i] !== undefined) return s.values[i];
      return null;
    });
    var opts = {
      tzDate: zoned,
      width: chartWidth(body),
      height: 200,
      // A single point (the first minute after the collectors start) would get an axis of years (uPlot
      // widens it before this is asked): an hour before it and a minute after instead.
      scales: {x: {time: true, range: function (u, min, max) {
                 var xs = u.data[0];
                 return xs.length === 1 ? [xs[0] - 3600, xs[0] + 60] : [min, max];
               }},
               y: {range: function (u, min, max) { return [Math.min(0, min), max > 0 ? max * 1.05 : 1]; }}},
      // Away from the cursor the legend shows the newest minute (not "--"); under it, the minute pointed at.
      series: [{label: TEXT.time || "Time",
                value: function (u, v) { return isoTime(v === null || v === undefined ? t[t.length - 1] : v); }}]
        .concat(drawn.map(function (s, i) {
          return {label: s.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: false,
                  dash: s.peak ? [5, 4] : undefined,
                  value: function (u, v) { return format(v === null || v === undefined ? newest[i] : v); }};
        })),
      axes: [{stroke: "currentColor", grid: {stroke: "rgba(127,127,127,.2)"}, ticks: {stroke: "rgba(127,127,127,.3)"},
              values: TIME_AXIS, incrs: TIME_STEPS},
             {stroke: "currentColor", size: 72, grid: {stroke: "rgba(127,127,127,.2)"}, ticks: {stroke: "rgba(127,127,127,.3)"},
              values: function (u, values) { return values.map(format); }}],
      legend: {live: true},
      cursor: {points: {size: 6}}
    };
    if (format === FORMAT.mib) opts.axes[1].incrs = MIB_STEPS;  // 8, 16, 32 GiB rather than 9.77 GiB
    var data = [t].concat(drawn.map(function (s) { return s.values; }));
    var plot = new window.uPlot(opts, data, body);
    plot.root.setAttribute("role", "img");
    var last = drawn.map(function (s) {
      for (var i = s.values.length - 1; i >= 0; i -= 1) if (s.values[i] !== null) return s.label + " " + format(s.values[i]);
      return s.label + " —";
    });
    plot.root.setAttribute("aria-label", figure.querySelector("figcaption").textContent + ": " + last.join(", "));
    // The newest values, written out: readable without hovering, and by a screen reader.
    figure.appendChild(el("p", {className: "chart-latest muted", "data-testid": "chart-latest", text: last.join(" · ")}));
    figure.dataset.state = "drawn";
    body.uplot = plot;
    charts.push({plot: plot, body: body});
  }

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      charts.forEach(function (c) { c.plot.setSize({width: chartWidth(c.body), height: 200}); });
    }, 150);
  });

  // --- heat levels ------------------------------------------------------------------------------------

  function level(util) { return Math.max(0, Math.min(10, Math.round(util / 10))); }

  // Sequential, light to dark; readable in both colour schemes (the canvas has no CSS).
  var HEAT = ["#eef6ff", "#d6e9fb", "#b6d8f5", "#8fc2ec", "#64a8e0", "#2f6fb0", "#2266a8", "#175ea3",
              "#0f4a87", "#0a386b", "#062650"];

  function drawHeatmap(container, heatmap, nodeUrl) {
    container.textContent = "";
    var rows = heatmap.nodes.length;
    var cols = heatmap.columns.length;
    if (!rows) {
      container.appendChild(el("p", {className: "empty", text: TEXT.noGpus}));
      return;
    }
    var any = heatmap.values.some(function (row) { return row.some(function (v) { return v !== null; }); });
    if (!any) {
      container.appendChild(el("p", {className: "empty chart-empty", "data-testid": "chart-empty", text: TEXT.empty}));
      return;
    }
    var width = Math.max(240, Math.floor(container.getBoundingClientRect().width));
    var label = width < 500 ? 56 : 84;
    var rowHeight = rows <= 40 ? 16 : Math.max(2, Math.floor(640 / rows));
    var showLabels = rowHeight >= 10;
    var plotLeft = showLabels ? label : 0;
    var cellWidth = (width - plotLeft) / cols;
    var height = rows * rowHeight + 18;
    var canvas = el("canvas", {role: "img", "aria-label": TEXT.heatmapLabel, "data-testid": "heatmap-canvas"});
    var ratio = window.devicePixelRatio || 1;
    canvas.width = width * ratio;
    canvas.height = height * ratio;
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    var ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (var r = 0; r < rows; r += 1) {
      if (showLabels) {
        ctx.fillStyle = dark ? "#e6e9ef" : "#1d2330";
        ctx.fillText(heatmap.nodes[r].slice(0, 10), 2, r * rowHeight + rowHeight / 2);
      }
      for (var c = 0; c < cols; c += 1) {
        var v = heatmap.values[r][c];
        ctx.fillStyle = v === null ? (dark ? "#1b222c" : "#f3f4f6") : HEAT[level(v)];
        ctx.fillRect(plotLeft + c * cellWidth, r * rowHeight, Math.ceil(cellWidth), rowHeight - (rowHeight > 4 ? 1 : 0));
      }
    }
    ctx.fillStyle = dark ? "#a7b0bf" : "#5a6374";
    ctx.fillText(isoMinute(zoned(heatmap.columns[0])), plotLeft, rows * rowHeight + 9);
    var end = isoMinute(zoned(heatmap.columns[cols - 1] + heatmap.width_s));
    ctx.fillText(end, width - ctx.measureText(end).width - 2, rows * rowHeight + 9);
    var readout = el("p", {className: "muted heatmap-readout", "aria-live": "polite", text: "\u00a0"});
    canvas.addEventListener("mousemove", function (event) {
      var box = canvas.getBoundingClientRect();
      var x = event.clientX - box.left - plotLeft;
      var row = Math.floor((event.clientY - box.top) / rowHeight);
      var col = Math.floor(x / cellWidth);
      if (row < 0 || row >= rows || col < 0 || col >= cols) return;
      var value = heatmap.values[row][col];
      var when = isoTime(heatmap.columns[col]);
      readout.textContent = heatmap.nodes[row] + " · " + when + " · " + (value === null ? TEXT.noData : FORMAT.percent(value));
    });
    canvas.addEventListener("click", function (event) {
      var box = canvas.getBoundingClientRect();
      var row = Math.floor((event.clientY - box.top) / rowHeight);
      if (nodeUrl && row >= 0 && row < rows) window.location.href = nodeUrl.replace("NODE", encodeURIComponent(heatmap.nodes[row]));
    });
    container.appendChild(canvas);
    container.appendChild(readout);
    container.appendChild(legend());
  }

  function legend() {
    var scale = el("p", {className: "heat-legend muted"});
    scale.appendChild(document.createTextNode("0 % "));
    for (var i = 0; i <= 10; i += 1) scale.appendChild(el("span", {className: "heat heat-" + i, "aria-hidden": "true"}));
    scale.appendChild(document.createTextNode(" 100 %"));
    return scale;
  }

  // --- the fleet ----------------------------------------------------------------------------------------

  function summary(root, data) {
    var list = part(root, "summary");
    if (!list) return;
    list.textContent = "";
    var s = data.summary;
    var rows = [
      [TEXT.summaryGpus, s.gpus_live + " / " + s.gpus],
      [TEXT.summaryUtil, FORMAT.percent(s.util_mean)],
      [TEXT.summaryMemory, FORMAT.mib(s.fb_used_mib) + " / " + FORMAT.mib(s.fb_total_mib)],
      [TEXT.summaryPower, FORMAT.watts(s.power_w)],
      [TEXT.summaryCollectors, s.collectors_live + " / " + s.nodes]
    ];
    rows.forEach(function (row) {
      list.appendChild(el("dt", {text: row[0]}));
      list.appendChild(el("dd", {text: row[1], "data-testid": "summary-value"}));
    });
  }

  function liveGrid(root, data) {
    var holder = part(root, "live");
    if (!holder) return;
    holder.textContent = "";
    if (!data.nodes.length) {
      holder.appendChild(el("p", {className: "empty", text: TEXT.noGpus}));
      return;
    }
    // The fleet's GPUs come in columns (gpus.node, gpus.index, gpus.live, gpus.util, ...): one value a GPU
    // in each, grouped by node in the order of data.nodes; gpus.node is the position of the GPU's node.
    var gpus = data.gpus;
    var byNode = data.nodes.map(function () { return []; });
    gpus.node.forEach(function (n, i) { byNode[n].push(i); });
    var width = byNode.reduce(function (n, mine) { return Math.max(n, mine.length); }, 0);
    var head = el("tr", {}, [el("th", {scope: "col", text: TEXT.node})]);
    for (var g = 0; g < width; g += 1) head.appendChild(el("th", {scope: "col", text: String(g)}));
    var body = el("tbody");
    var nodeUrl = root.dataset.nodeUrl;
    var gpuUrl = root.dataset.gpuUrl;
    data.nodes.forEach(function (node, n) {
      var name = el("a", {href: nodeUrl.replace("NODE", encodeURIComponent(node.name)), text: node.name});
      var row = el("tr", {"data-node": node.name}, [el("th", {scope: "row"}, [name])]);
      var mine = byNode[n];
      var anyLive = mine.some(function (i) { return gpus.live[i]; });
      if (!anyLive) {
        row.appendChild(el("td", {colspan: String(Math.max(1, width)), className: "muted", text: whyNoData(node.collector)}));
        body.appendChild(row);
        return;
      }
      mine.forEach(function (i) {
        var index = gpus.index[i];
        var href = gpuUrl.replace("NODE", encodeURIComponent(node.name)).replace(/\/0\/$/, "/" + index + "/");
        var util = gpus.util[i];
        var td;
        if (gpus.live[i]) {
          var title = TEXT.gpu + " " + index + " · " + TEXT.utilization + " " + FORMAT.percent(util) + " · " +
              TEXT.memory + " " + FORMAT.mib(gpus.fb_used_mib[i]) + " / " + FORMAT.mib(gpus.fb_total_mib[i]) + " · " +
              TEXT.power + " " + FORMAT.watts(gpus.power_w[i]) + (gpus.job[i] ? " · " + TEXT.job + " " + gpus.job[i] : "");
          var shown = util === null ? "—" : Math.round(util) + "%";
          // The accessible name starts with the text shown (WCAG 2.5.3), then says what it is.
          td = el("td", {className: "heat heat-" + level(util || 0), "data-gpu": String(index)},
                  [el("a", {href: href, title: title, "aria-label": shown + " · " + title, text: shown})]);
        } else {
          td = el("td", {className: "no-data", "data-gpu": String(index)},
                  [el("a", {href: href, title: TEXT.noData, "aria-label": TEXT.gpu + " " + index + ": " + TEXT.noData, text: "—"})]);
        }
        row.appendChild(td);
      });
      body.appendChild(row);
    });
    var table = el("table", {className: "live compact", "data-testid": "live-grid"}, [el("thead", {}, [head]), body]);
    holder.appendChild(table);
  }

  function overview(root, data) {
    summary(root, data);
    liveGrid(root, data);
    drawHeatmap(part(root, "heatmap"), data.heatmap, root.dataset.nodeUrl);
    lineChart(root, "gpu", data.gpu.t, [{label: TEXT.utilization, values: data.gpu.gpu_util, format: FORMAT.percent}], TEXT.empty);
    lineChart(root, "power", data.gpu.t, [{label: TEXT.power, values: data.gpu.gpu_power_w, format: FORMAT.watts}], TEXT.empty);
    lineChart(root, "fabric", data.fabric.t, [{label: TEXT.sent, values: data.fabric.ib_tx_bps, format: FORMAT.bytes},
                                              {label: TEXT.received, values: data.fabric.ib_rx_bps, format: FORMAT.bytes}], TEXT.empty);
    lineChart(root, "filesystem", data.filesystem.t, [{label: TEXT.read, values: data.filesystem.fs_read_bps, format: FORMAT.bytes},
                                                      {label: TEXT.write, values: data.filesystem.fs_write_bps, format: FORMAT.bytes}], TEXT.empty);
  }

  // --- a node -----------------------------------------------------------------------------------------

  function perGpu(data, field, format) {
    return data.gpus.filter(function (g) { return g[field]; }).map(function (g) {
      return {label: TEXT.gpu + " " + g.index, values: g[field], format: format};
    });
  }

  function node(root, data) {
    var s = data.series;
    var why = s.t.length ? TEXT.empty : whyNoData(data.collector);
    lineChart(root, "gpu-util", s.t, perGpu(data, "util", FORMAT.percent), why);
    lineChart(root, "gpu-memory", s.t, perGpu(data, "fb_used_mib", FORMAT.mib), why);
    lineChart(root, "gpu-power", s.t, perGpu(data, "power_w", FORMAT.watts), why);
    lineChart(root, "fabric", s.t, [{label: TEXT.sent, values: s.ib_tx_bps, format: FORMAT.bytes},
                                    {label: TEXT.received, values: s.ib_rx_bps, format: FORMAT.bytes}], why);
    var mounts = [];
    Object.keys(data.mounts).sort().forEach(function (path) {
      var m = data.mounts[path];
      mounts.push({label: path + " " + TEXT.read, values: m.read_bps, format: FORMAT.bytes});
      mounts.push({label: path + " " + TEXT.write, values: m.write_bps, format: FORMAT.bytes});
    });
    if (!mounts.length) mounts = [{label: TEXT.read, values: s.fs_read_bps, format: FORMAT.bytes},
                                  {label: TEXT.write, values: s.fs_write_bps, format: FORMAT.bytes}];
    lineChart(root, "mounts", s.t, mounts, why);
    lineChart(root, "cpu", s.t, [{label: TEXT.busy, values: s.cpu_busy, format: FORMAT.ratio},
                                 {label: TEXT.iowait, values: s.cpu_iowait, format: FORMAT.ratio}], why);
    if (!s.t.length) setStatus(root, why);
  }

  // --- a GPU ------------------------------------------------------------------------------------------

  function gpu(root, data) {
    var s = data.series;
    var why = s.t.length ? TEXT.empty : whyNoData(data.collector);
    lineChart(root, "activity", s.t, [{label: TEXT.utilization, values: s.util.map(function (v) { return v === null ? null : v / 100; }), format: FORMAT.ratio},
                                      {label: "SM", values: s.sm_active, format: FORMAT.ratio},
                                      {label: "tensor", values: s.tensor_active, format: FORMAT.ratio},
                                      {label: "DRAM", values: s.dram_active, format: FORMAT.ratio}], why);
    lineChart(root, "memory", s.t, [{label: TEXT.memory, values: s.fb_used_mib, format: FORMAT.mib},
                                    {label: TEXT.peak, values: s.fb_used_max_mib, format: FORMAT.mib, peak: true}], why);
    lineChart(root, "power", s.t, [{label: TEXT.power, values: s.power_w, format: FORMAT.watts},
                                   {label: TEXT.peak, values: s.power_max_w, format: FORMAT.watts, peak: true}], why);
    lineChart(root, "temperature", s.t, [{label: TEXT.temperature, values: s.temp_c, format: FORMAT.celsius},
                                         {label: TEXT.peak, values: s.temp_max_c, format: FORMAT.celsius, peak: true}], why);
    lineChart(root, "links", s.t, [{label: "PCIe " + TEXT.sent, values: s.pcie_tx_bps, format: FORMAT.bytes},
                                   {label: "PCIe " + TEXT.received, values: s.pcie_rx_bps, format: FORMAT.bytes},
                                   {label: "NVLink", values: s.nvlink_bps, format: FORMAT.bytes}], why);
    var instances = data.instances;
    var figure = root.querySelector('[data-chart="instances"]');
    if (!instances.length) {
      if (figure) figure.hidden = true;
    } else {
      lineChart(root, "instances", instances[0].t, instances.map(function (i) {
        return {label: "GI " + i.instance + (i.profile ? " (" + i.profile + ")" : ""), values: i.util, format: FORMAT.percent};
      }), why);
    }
    var jobs = part(root, "jobs");
    if (jobs && data.jobs.length) {
      jobs.textContent = TEXT.job + ": ";
      // Job ids as numbers (5, 9, 11), the services' names after them.
      data.jobs.slice().sort(function (a, b) {
        return a.localeCompare(b, undefined, {numeric: true});
      }).forEach(function (job, i) {
        if (i) jobs.appendChild(document.createTextNode(", "));
        jobs.appendChild(el("a", {href: root.dataset.jobUrl.replace("JOB", encodeURIComponent(job)), text: job}));
      });
    }
    if (!s.t.length) setStatus(root, why);
  }

  // --- a job ------------------------------------------------------------------------------------------

  function job(root, data) {
    var keys = Object.keys(data.gpu_series).sort();
    lineChart(root, "gpu-util", data.t, keys.map(function (k) { return {label: k, values: data.gpu_series[k].util, format: FORMAT.percent}; }), TEXT.empty);
    lineChart(root, "gpu-memory", data.t, keys.map(function (k) { return {label: k, values: data.gpu_series[k].fb_used_mib, format: FORMAT.mib}; }), TEXT.empty);
    var nodes = Object.keys(data.node_series).sort();
    lineChart(root, "fs", data.t, nodes.map(function (n) { return {label: n, values: data.node_series[n].fs_read_bps, format: FORMAT.bytes}; }), TEXT.empty);
    lineChart(root, "fabric", data.t, nodes.map(function (n) { return {label: n, values: data.node_series[n].ib_tx_bps, format: FORMAT.bytes}; }), TEXT.empty);
    lineChart(root, "iowait", data.t, nodes.map(function (n) { return {label: n, values: data.node_series[n].cpu_iowait, format: FORMAT.ratio}; }), TEXT.empty);
  }

  var KINDS = {overview: overview, node: node, gpu: gpu, job: job};

  /* A container with data-refresh="SECONDS" reloads its data that often while the page is visible (a new
   * per-minute bucket arrives once a minute), keeping what it shows until the new answer is in. */
  function scheduleRefresh(root) {
    var every = Number(root.dataset.refresh || 0);
    if (!every) return;
    setTimeout(function again() {
      if (document.hidden) { setTimeout(again, 5000); return; }
      load(root);
    }, every * 1000);
  }

  function load(root) {
    var draw = KINDS[root.dataset.telemetry];
    if (!draw) return;
    if (!root.dataset.loaded) setStatus(root, TEXT.loading);
    getJSON(root.dataset.api).then(function (data) {
      setStatus(root, "");
      draw(root, data);
      root.dataset.loaded = "true";
      root.dataset.loadedAt = String(Date.now());
    }).catch(function (error) {
      setStatus(root, TEXT.failed + " " + error.message, true);
      root.dataset.loaded = "error";
    }).then(function () { scheduleRefresh(root); });
  }

  function start() {
    readTexts();
    document.querySelectorAll("[data-telemetry]").forEach(load);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
}());
