package main

import "testing"

// Labels of points that fall within a few pixels of each other (etcd,
// zookeeper and zk.Lock sat within 21 × 2 px) are moved apart.
func TestChartLabelsDoNotOverlap(t *testing.T) {
	pts := []struct {
		x, y  float64
		label string
	}{{300, 200, "etcd"}, {310, 201, "zookeeper"}, {321, 202, "peer: zookeeper zk.Lock"}, {305, 199, "postgres"}, {600, 200, "far away"}}
	var placed []labelBox
	for _, p := range pts {
		placed = append(placed, placeLabel(placed, p.x, p.y, p.label))
	}
	for i := range placed {
		for j := range i {
			if placed[i].overlaps(placed[j]) {
				t.Errorf("label %q at %+v overlaps %q at %+v", pts[i].label, placed[i], pts[j].label, placed[j])
			}
		}
	}
	if placed[4].y != 200 || placed[0].y != 200 {
		t.Errorf("labels with room moved: %+v, %+v", placed[0], placed[4])
	}
}
