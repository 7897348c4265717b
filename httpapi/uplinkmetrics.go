package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsdht/tsdht/tsdb/wire"
)

// The node's uplinks (package uplink), one series per uplink labelled by its target.
var (
	uplinkLabels      = []string{"uplink", "url"}
	descUplinkSeries  = prometheus.NewDesc("tsdht_uplink_series", "Series this node forwards on the uplink (it is their first live registry replica).", uplinkLabels, nil)
	descUplinkLagS    = prometheus.NewDesc("tsdht_uplink_lag_seconds", "How far behind the newest forwardable time the furthest-behind series this node forwards is.", uplinkLabels, nil)
	descUplinkLagPts  = prometheus.NewDesc("tsdht_uplink_lag_points", "Points (windows, for a windowed uplink) not yet forwarded, as last counted.", uplinkLabels, nil)
	descUplinkSent    = prometheus.NewDesc("tsdht_uplink_sent_points_total", "Points (or windows) the target acknowledged.", uplinkLabels, nil)
	descUplinkBytes   = prometheus.NewDesc("tsdht_uplink_sent_bytes_total", "Request bodies sent to the target, as sent (compressed).", uplinkLabels, nil)
	descUplinkRetries = prometheus.NewDesc("tsdht_uplink_retries_total", "Requests to the target that failed and were retried.", uplinkLabels, nil)
	descUplinkReject  = prometheus.NewDesc("tsdht_uplink_rejected_points_total", "Points the target refused for good (an HTTP 4xx).", uplinkLabels, nil)
	descUplinkLate    = prometheus.NewDesc("tsdht_uplink_late_windows_total", "Windows forwarded again because late points arrived in them.", uplinkLabels, nil)
	descUplinkNever   = prometheus.NewDesc("tsdht_uplink_never_forwarded_points_total", "Points retention dropped before they were forwarded.", uplinkLabels, nil)
	uplinkDescs       = []*prometheus.Desc{descUplinkSeries, descUplinkLagS, descUplinkLagPts, descUplinkSent, descUplinkBytes,
		descUplinkRetries, descUplinkReject, descUplinkLate, descUplinkNever}
)

func collectUplinks(ch chan<- prometheus.Metric, ups []wire.UplinkStats) {
	for _, u := range ups {
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, u.ID, u.URL)
		}
		k := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), u.ID, u.URL)
		}
		g(descUplinkSeries, float64(u.Series))
		g(descUplinkLagS, u.LagSeconds)
		g(descUplinkLagPts, float64(u.LagPoints))
		k(descUplinkSent, u.SentPoints)
		k(descUplinkBytes, u.SentBytes)
		k(descUplinkRetries, u.Retries)
		k(descUplinkReject, u.Rejected)
		k(descUplinkLate, u.Late)
		k(descUplinkNever, u.NeverForwarded)
	}
}
