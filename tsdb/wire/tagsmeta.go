package wire

import "sort"

// TagsMeta returns the MetaReq that adds tags (replacing values of keys already there)
// to a series' catalog entry, pairs sorted by key: how /write, remote write and tsdht
// import record the tags of the series they write.
func TagsMeta(key string, tags map[string]string) *MetaReq {
	req := &MetaReq{Key: key, SetTags: true, AddTags: true}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		req.Pairs = append(req.Pairs, k, tags[k])
	}
	return req
}
